"""torch.distributed on the spyre device.

Importing ``torch_layouts`` installs this: a process-group backend for the ``spyre`` device type
(``spyre_gloo``: gloo over the host, PyTorch's default for spyre, so ``init_process_group()``
picks it) and spyre kernels for PyTorch's c10d collective ops that stage each collective
through the host. Groups made with ``"gloo"`` or ``"cpu:gloo,spyre:spyre_gloo"`` work as well.

Example::

    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.ones(4, 100, device="spyre", dtype=torch.float16)
    dist.all_reduce(x)          # x keeps its layout; only real elements crossed the host
"""

from __future__ import annotations

import torch.distributed as dist


def install() -> None:
    """Register the spyre backend and collective kernels (no-op without torch.distributed)."""
    if not dist.is_available():
        return
    from . import backend, kernels

    backend.register()
    kernels.register()
