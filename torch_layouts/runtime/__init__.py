"""The spyre device: registration of the C++ runtime with PyTorch."""

from __future__ import annotations

import atexit

import torch

from .. import _C
from . import device_module, dlpack, layout_records, printing, serialization, sharing, streams, tensor_methods, torch_spyre_api


def _drain_autograd_threads() -> None:
    """Let each spyre autograd thread drop its last graph task before the interpreter finalizes.

    PyTorch's device threads may release a finished backward's graph task (whose saved
    thread-local state holds a Python object) just after ``backward()`` returns; at exit that
    release would need the GIL and abort the process. One backward run through the engine
    directly, capturing no Python state, flushes each thread's queue deterministically.
    """
    try:
        for index in range(_C._device_count()):
            leaf = torch.zeros((), device=torch.device("spyre", index), requires_grad=True)
            out = leaf * 1
            torch.autograd.Variable._execution_engine.run_backward(
                (out,), (torch.ones_like(out),), False, False, (), True, True)
    except Exception:  # exiting (or a misconfigured device): never turn a clean exit into an error
        pass


def init() -> None:
    """Rename PrivateUse1 to ``spyre`` and install the runtime (idempotent)."""
    if torch._C._get_privateuse1_backend_name() == "spyre":
        return
    torch.utils.rename_privateuse1_backend("spyre")
    torch._register_device_module("spyre", device_module)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    _C._set_layout_records(layout_records)
    tensor_methods.install()
    printing.install()
    torch_spyre_api.install()
    dlpack.install()
    sharing.install()
    streams.install()
    atexit.register(_drain_autograd_threads)
    serialization.install()  # each family's own classes are allowed when it registers (core.family)
