"""The spyre kernels of PyTorch's c10d collective ops: each runs the op's CPU kernel on host copies.

``dist.all_reduce(x)`` on a spyre ``x`` dispatches ``c10d::allreduce_`` to its PrivateUse1 kernel.
PyTorch's generic one hands the spyre tensors to the group's spyre backend, which would have to
read device memory itself (gloo cannot); ours stages them instead: the real elements of every input leave the
device through its DMA program, the group's host engine (gloo) runs the same op on those host
tensors, and each result is copied back into its spyre tensor in place, keeping its layout.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.distributed import ProcessGroup

from .staging import Staging

SPYRE = torch.device("spyre")
CPU = torch.device("cpu")


class Spec(NamedTuple):
    """How an op uses its leading tensor arguments, and whether it returns its first one."""

    reads: tuple[int, ...]  # argument positions whose values the collective reads
    writes: tuple[int, ...]  # argument positions it writes (results copied back)
    returns_first: bool  # the op returns (args[0], work) rather than work


# c10d op -> which tensor arguments it reads and writes (from the op schemas in torch.ops.c10d).
OPS: dict[str, Spec] = {
    "allreduce_": Spec((0,), (0,), True),
    "allreduce_coalesced_": Spec((0,), (0,), False),
    "broadcast_": Spec((0,), (0,), True),
    "reduce_": Spec((0,), (0,), False),
    "allgather_": Spec((1,), (0,), True),
    "_allgather_base_": Spec((1,), (0,), True),
    "allgather_coalesced_": Spec((1,), (0,), False),
    "allgather_into_tensor_coalesced_": Spec((1,), (0,), False),
    "reduce_scatter_": Spec((1,), (0,), True),
    "_reduce_scatter_base_": Spec((1,), (0,), True),
    "reduce_scatter_tensor_coalesced_": Spec((1,), (0,), False),
    "gather_": Spec((1,), (0,), False),
    "scatter_": Spec((1,), (0,), True),
    "alltoall_": Spec((1,), (0,), True),
    "alltoall_base_": Spec((1,), (0,), False),
    "send": Spec((0,), (), False),
    "recv_": Spec((), (0,), False),
    "recv_any_source_": Spec((), (0,), False),
    "barrier": Spec((0,), (), False),  # its one-element tensor only names the device
}


def _schema_index(op: torch._ops.OpOverload, name: str) -> int:
    return next(i for i, a in enumerate(op._schema.arguments) if a.name == name)


def _host_group(boxed_group: torch.ScriptObject) -> torch.ScriptObject:
    """The group whose CPU kernel runs the staged collective (boxed, for the dispatcher).

    A group with a spyre backend (``spyre_gloo``, or the gloo of a ``"gloo"`` group, registered
    for spyre too) runs it there, through a throwaway group that serves host tensors with that
    backend; a group without one (e.g. ``"cpu:gloo"``) runs it on its own host backend.
    """
    group = ProcessGroup.unbox(boxed_group)
    if SPYRE.type not in {d.type for d in group._device_types}:
        return boxed_group
    host = ProcessGroup(group.rank(), group.size())
    host._register_backend(CPU, ProcessGroup.BackendType.CUSTOM, group._get_backend(SPYRE))
    host._set_default_backend(ProcessGroup.BackendType.CUSTOM)
    return host.boxed()


def _kernel(name: str, spec: Spec) -> Callable[..., Any]:
    op = getattr(torch.ops.c10d, name).default
    group_at = _schema_index(op, "process_group")
    async_at = next((i for i, a in enumerate(op._schema.arguments) if a.name == "async_op"), None)

    def kernel(*args: Any) -> Any:
        staging = Staging()
        staged = list(args)
        for i in sorted(set(spec.reads) | set(spec.writes)):
            staged[i] = staging.stage(args[i], read=i in spec.reads, write=i in spec.writes)
        staged[group_at] = _host_group(args[group_at])
        result = op(*staged)
        work = result[1] if spec.returns_first else result
        # async_op defaults to True in every schema that has it; send/recv are always asynchronous
        async_op = bool(args[async_at]) if async_at is not None and async_at < len(args) else True
        work = staging.chain(work, async_op)
        return (args[0], work) if spec.returns_first else work

    kernel.__name__ = f"spyre_{name}"
    kernel.__doc__ = f"c10d::{name} on spyre tensors, staged through the host engine."
    return kernel


_library: torch.library.Library | None = None


def register() -> None:
    """Install the spyre (PrivateUse1) kernels of every c10d collective op (idempotent)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("c10d", "IMPL")
    with warnings.catch_warnings():  # replacing PyTorch's generic PrivateUse1 kernels is the point
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        for name, spec in OPS.items():
            library.impl(name, _kernel(name, spec), "PrivateUse1")
    _library = library
