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
    directly, capturing no Python state, flushes each thread's queue deterministically. It runs
    with multithreading on: threads other than the importing one (gloo's callbacks, user threads)
    keep PyTorch's default and may have started device threads even though this one runs its own
    backward passes (``backward_on_calling_thread``).
    """
    try:
        with torch.autograd.set_multithreading_enabled(True):
            for index in range(_C._device_count()):
                leaf = torch.zeros((), device=torch.device("spyre", index), requires_grad=True)
                out = leaf * 1
                torch.autograd.Variable._execution_engine.run_backward(
                    (out,), (torch.ones_like(out),), False, False, (), True, True)
    except Exception:  # exiting (or a misconfigured device): never turn a clean exit into an error
        pass


def backward_on_calling_thread() -> None:
    """Run this thread's backward passes on the thread itself, as the CPU's run (see docs/design.md,
    "Backward on the calling thread"); ``torch.autograd.set_multithreading_enabled(True)`` undoes it.

    The device computes synchronously on the host, so autograd's per-device worker thread only
    adds a hand-off, and its own OpenMP team: with more OpenMP threads than cores, libgomp
    shortens every team's spin-wait and each parallel region pays a futex wake-up.

    >>> import threading, torch, torch_layouts
    >>> x = torch.ones(2, device="spyre", requires_grad=True)
    >>> seen = []
    >>> _ = x.register_hook(lambda grad: seen.append(threading.get_ident()))
    >>> (x * 2).sum().backward()
    >>> seen == [threading.get_ident()]
    True
    """
    torch.autograd.set_multithreading_enabled(False)


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
    backward_on_calling_thread()
    serialization.install()  # each family's own classes are allowed when it registers (core.family)
