"""What each rank runs in the distributed tests (see distributed_support.py).

Every collective runs twice in the same process group: on CPU tensors and on spyre tensors built
from the same data, rank 1's spyre tensors in a different layout from rank 0's. Each scenario
returns, per check, the spyre result (copied to the host), the CPU result and the layout facts.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from distributed_support import init, scenario

import torch_layouts
from torch_layouts import SpyreTensorLayout, htp

ROWS, COLS = 5, 70  # 70 columns: a float16 row pads to 128 on the device
GROUP: dist.ProcessGroup | None = None  # the group the collectives run on (None: the default group)


def data(shape: tuple[int, ...], dtype: torch.dtype, rank: int, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * salt + rank + 1)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g) + 0.5).to(dtype)
    return torch.randint(-20, 20, shape, generator=g).to(dtype)


class ToSpyre:
    """Moves CPU tensors to spyre in this rank's layout and remembers them for the layout checks."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.made: list[tuple[torch.Tensor, str]] = []

    def layout(self, x: torch.Tensor) -> Any:
        if self.rank % 2 == 0:
            return None  # the default layout
        if x.dim() == 2:
            return SpyreTensorLayout(tuple(x.shape), x.dtype, [1, 0])
        if x.dim() == 4 and x.dtype == torch.float32:
            return htp.R4CroutonLayout
        return None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        layout = self.layout(x)
        y = x.to("spyre") if layout is None else x.to("spyre", device_layout=layout)
        self.made.append((y, repr(y.device_tensor_layout())))
        return y

    def facts(self) -> dict[str, Any]:
        """Each tensor kept its layout, and its device memory is exactly a fresh copy of its values."""
        kept = all(repr(y.device_tensor_layout()) == r for y, r in self.made)
        clean = all(torch.equal(torch_layouts.device_memory(y),
                                torch_layouts.device_memory(
                                    y.cpu().to("spyre", device_layout=y.device_tensor_layout())))
                    for y, _ in self.made)
        return {"layout_kept": kept, "memory_clean": clean, "layouts": [r for _, r in self.made]}


Collective = Callable[[Callable[[torch.Tensor], torch.Tensor], torch.dtype, int, int], list[torch.Tensor]]


def _collectives() -> dict[str, Collective]:
    z = torch.zeros
    table: dict[str, Collective] = {}
    for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        def all_reduce(to, dt, r, w, op=op):  # noqa: ANN001
            x = to(data((ROWS, COLS), dt, r))
            dist.all_reduce(x, op=getattr(dist.ReduceOp, op), group=GROUP)
            return [x]
        table[f"all_reduce_{op.lower()}"] = all_reduce

    def all_reduce_view(to, dt, r, w):  # noqa: ANN001
        x = to(data((ROWS + 1, COLS), dt, r))
        view = x[1:, 3:40]
        if view.device.type == "cpu":  # gloo reduces a CPU view's storage as if it were contiguous
            whole = view.contiguous()
            dist.all_reduce(whole, group=GROUP)
            view.copy_(whole)
        else:
            dist.all_reduce(view, group=GROUP)
        return [x]

    def all_reduce_async(to, dt, r, w):  # noqa: ANN001
        x = to(data((ROWS, COLS), dt, r))
        work = dist.all_reduce(x, async_op=True, group=GROUP)
        work.wait()
        value = work.get_future().value()
        assert work.is_completed() and value[0].device == x.device, value
        return [x, value[0]]

    def all_reduce_large_overlapping(to, dt, r, w):  # noqa: ANN001  (>= 1 MiB: reused host buffers)
        xs = [to(data((2048, 260), dt, r, salt=i)) for i in range(3)]
        works = [dist.all_reduce(x, async_op=True, group=GROUP) for x in xs[:2]]
        dist.all_reduce(xs[2], op=dist.ReduceOp.MAX, group=GROUP)
        for work in works:
            work.wait()
        return xs

    def broadcast(to, dt, r, w):  # noqa: ANN001
        x = to(data((ROWS, COLS), dt, r))
        dist.broadcast(x, src=w - 1, group=GROUP)
        return [x]

    def broadcast_parameter(to, dt, r, w):  # noqa: ANN001  (a leaf that requires grad, as DDP's)
        x = to(data((ROWS, COLS), dt, r))
        if dt.is_floating_point:
            x.requires_grad_()
        dist.broadcast(x, src=0, group=GROUP)
        return [x.detach()]

    def all_gather(to, dt, r, w):  # noqa: ANN001
        outs = [to(z(ROWS, COLS, dtype=dt)) for _ in range(w)]
        dist.all_gather(outs, to(data((ROWS, COLS), dt, r)), group=GROUP)
        return outs

    def all_gather_into_tensor(to, dt, r, w):  # noqa: ANN001
        out = to(z(w * ROWS, COLS, dtype=dt))
        dist.all_gather_into_tensor(out, to(data((ROWS, COLS), dt, r)), group=GROUP)
        return [out]

    def reduce_scatter(to, dt, r, w):  # noqa: ANN001
        out = to(z(ROWS, COLS, dtype=dt))
        dist.reduce_scatter(out, [to(data((ROWS, COLS), dt, r, salt=i)) for i in range(w)], group=GROUP)
        return [out]

    def reduce_scatter_tensor(to, dt, r, w):  # noqa: ANN001
        out = to(z(ROWS, COLS, dtype=dt))
        dist.reduce_scatter_tensor(out, to(data((w * ROWS, COLS), dt, r)), group=GROUP)
        return [out]

    def all_to_all(to, dt, r, w):  # noqa: ANN001
        outs = [to(z(ROWS, COLS, dtype=dt)) for _ in range(w)]
        dist.all_to_all(outs, [to(data((ROWS, COLS), dt, r, salt=i)) for i in range(w)], group=GROUP)
        return outs

    def all_to_all_single(to, dt, r, w):  # noqa: ANN001
        out = to(z(w * 3, COLS, dtype=dt))
        dist.all_to_all_single(out, to(data((w * 3, COLS), dt, r)), group=GROUP)
        return [out]

    def all_to_all_single_uneven(to, dt, r, w):  # noqa: ANN001
        sends = [r + 1 + j for j in range(w)]  # rank r sends r+1+j rows to rank j
        receives = [j + 1 + r for j in range(w)]
        out = to(z(sum(receives), COLS, dtype=dt))
        dist.all_to_all_single(out, to(data((sum(sends), COLS), dt, r)), receives, sends, group=GROUP)
        return [out]

    def send_recv(to, dt, r, w):  # noqa: ANN001
        got = to(z(ROWS, COLS, dtype=dt))
        peer = (r + 1) % w
        if r % 2 == 0:
            dist.send(to(data((ROWS, COLS), dt, r)), peer, group=GROUP)
            dist.recv(got, (r - 1) % w, group=GROUP)
        else:
            dist.recv(got, (r - 1) % w, group=GROUP)
            dist.send(to(data((ROWS, COLS), dt, r)), peer, group=GROUP)
        return [got]

    def isend_irecv(to, dt, r, w):  # noqa: ANN001
        got = to(z(ROWS, COLS, dtype=dt))
        works = [dist.isend(to(data((ROWS, COLS), dt, r)), (r + 1) % w, group=GROUP),
                 dist.irecv(got, (r - 1) % w, group=GROUP)]
        for work in works:
            work.wait()
        assert all(work.is_completed() for work in works)
        return [got]

    def reduce(to, dt, r, w):  # noqa: ANN001
        x = to(data((ROWS, COLS), dt, r))
        dist.reduce(x, dst=0, group=GROUP)
        return [x] if r == 0 else []

    def gather(to, dt, r, w):  # noqa: ANN001
        outs = [to(z(ROWS, COLS, dtype=dt)) for _ in range(w)] if r == 0 else None
        dist.gather(to(data((ROWS, COLS), dt, r)), outs, dst=0, group=GROUP)
        return outs or []

    def scatter(to, dt, r, w):  # noqa: ANN001
        out = to(z(ROWS, COLS, dtype=dt))
        ins = [to(data((ROWS, COLS), dt, r, salt=i)) for i in range(w)] if r == 0 else None
        dist.scatter(out, ins, src=0, group=GROUP)
        return [out]

    def all_reduce_4d(to, dt, r, w):  # noqa: ANN001  (an HTP crouton on odd ranks for float32)
        x = to(data((1, 3, 5, 30), dt, r))
        dist.all_reduce(x, group=GROUP)
        return [x]

    def all_reduce_coalesced(to, dt, r, w):  # noqa: ANN001
        xs = [to(data((ROWS, COLS), dt, r, salt=i)) for i in range(2)] + [to(data((3, 40), dt, r))]
        with warnings.catch_warnings():  # deprecated in torch 2.13, still served by gloo
            warnings.simplefilter("ignore", FutureWarning)
            dist.all_reduce_coalesced(xs, group=GROUP)
        return xs

    def coalescing_manager(to, dt, r, w):  # noqa: ANN001  (FSDP-style coalesced all-gathers)
        outs = [to(torch.zeros(w * ROWS, COLS, dtype=dt)) for _ in range(2)]
        ins = [to(data((ROWS, COLS), dt, r, salt=i)) for i in range(2)]
        with dist._coalescing_manager(group=GROUP):
            for out, inp in zip(outs, ins):
                dist.all_gather_into_tensor(out, inp, group=GROUP)
        return outs

    def batch_isend_irecv(to, dt, r, w):  # noqa: ANN001
        got = to(torch.zeros(ROWS, COLS, dtype=dt))
        ops = [dist.P2POp(dist.isend, to(data((ROWS, COLS), dt, r)), (r + 1) % w, group=GROUP),
               dist.P2POp(dist.irecv, got, (r - 1) % w, group=GROUP)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return [got]

    def barrier(to, dt, r, w):  # noqa: ANN001
        dist.barrier(group=GROUP)
        return []

    for fn in (all_reduce_view, all_reduce_async, all_reduce_large_overlapping, broadcast,
               broadcast_parameter, all_gather, all_gather_into_tensor, reduce_scatter,
               reduce_scatter_tensor, all_to_all, all_to_all_single, all_to_all_single_uneven,
               send_recv, isend_irecv, reduce, gather, scatter, all_reduce_4d, all_reduce_coalesced,
               coalescing_manager, batch_isend_irecv, barrier):
        table[fn.__name__] = fn
    return table


COLLECTIVES = _collectives()
DTYPES = (torch.float16, torch.float32, torch.bfloat16, torch.int32)


def compare_all(rank: int, world: int, group: dist.ProcessGroup | None,
                cpu_group: dist.ProcessGroup | None, names: list[str] | None = None,
                dtypes: tuple[torch.dtype, ...] = DTYPES) -> dict[str, Any]:
    """Run each collective on CPU tensors in ``cpu_group`` and on spyre tensors in ``group``."""
    global GROUP
    results: dict[str, Any] = {}
    for dt in dtypes:
        for name in names or COLLECTIVES:
            if name == "all_reduce_avg" and not dt.is_floating_point:
                continue
            fn = COLLECTIVES[name]
            to = ToSpyre(rank)
            try:
                GROUP = cpu_group
                cpu = fn(lambda x: x, dt, rank, world)
                GROUP = group
                spyre = fn(to, dt, rank, world)
            finally:
                GROUP = None
            results[f"{name}[{dt}]"] = {"cpu": cpu, "spyre": [t.cpu() for t in spyre],
                                        "devices": [str(t.device) for t in spyre], **to.facts()}
    return results


def dtensor_checks(world: int, cpu_group: dist.ProcessGroup) -> dict[str, Any]:
    """Functional collectives and DTensor on the default spyre mesh and on a CPU mesh."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    out: dict[str, Any] = {}
    for device in ("cpu", "spyre"):
        mesh = (DeviceMesh.from_group(cpu_group, "cpu") if device == "cpu"
                else init_device_mesh("spyre", (world,)))
        x = data((ROWS * world, COLS), torch.float32, dist.get_rank()).to(device)
        torch.manual_seed(0)
        sharded = distribute_tensor(torch.randn(ROWS * world, COLS).to(device), mesh, [Shard(0)])
        results = {"all_reduce": funcol.all_reduce(x, "sum", mesh),
                   "all_gather": funcol.all_gather_tensor(x, 0, mesh),
                   "reduce_scatter": funcol.reduce_scatter_tensor(x, "sum", 0, mesh),
                   "local_shard": sharded.to_local(),
                   "replicated": (sharded * 2).redistribute(mesh, [Replicate()]).to_local()}
        results = {k: funcol.wait_tensor(v) for k, v in results.items()}
        out[device] = {k: v.cpu() for k, v in results.items()}
        out[f"{device}_devices"] = sorted({v.device.type for v in results.values()})
    return out


def _backends(group: dist.ProcessGroup) -> dict[str, str]:
    return {d.type: group._get_backend(d).name() for d in group._device_types}


@scenario
def collectives(rank: int, world: int) -> dict[str, Any]:
    """Every collective against CPU, in the three kinds of group that serve spyre tensors.

    The default group comes from ``init_process_group()`` (PyTorch picks spyre_gloo for the
    spyre accelerator), each rank on its own device; ``new_group("gloo")`` runs every
    collective in every dtype, and ``new_group("cpu:gloo,spyre:spyre_gloo")`` a few.
    """
    torch.spyre.set_device(rank % torch.spyre.device_count())
    init(rank, world, None)
    gloo = dist.new_group(backend="gloo")
    pair = dist.new_group(backend="cpu:gloo,spyre:spyre_gloo")
    cpu_only = _error(lambda: dist.all_reduce(torch.ones(2)))  # like cuda's nccl-only default group
    objects: list[Any] = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    return {
        "gloo": compare_all(rank, world, gloo, gloo),
        "default": compare_all(rank, world, None, gloo, ["all_reduce_sum", "all_gather_into_tensor",
                                                         "broadcast", "reduce_scatter_tensor",
                                                         "send_recv", "barrier"], (torch.float16,)),
        "pair": compare_all(rank, world, pair, gloo, ["all_reduce_max", "all_to_all", "scatter"],
                            (torch.float32,)),
        "backends": {"default": _backends(dist.group.WORLD), "gloo": _backends(gloo),
                     "pair": _backends(pair)},
        "current_device": torch.spyre.current_device(), "objects": objects,
        "cpu_on_default_group": cpu_only, "dtensor": dtensor_checks(world, gloo),
    }


# -- faults --------------------------------------------------------------------
def _error(fn: Callable[[], Any]) -> str | None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (the test compares the errors)
        return f"{type(e).__name__}: {e}"
    return None


def _local_mismatches(world: int, device: str) -> dict[str, str | None]:
    """A rank's output does not fit its input: the check fails before any data moves."""
    return {
        f"shape_{device}": _error(lambda: dist.all_gather_into_tensor(
            torch.zeros(world * ROWS + 1, COLS, device=device), torch.ones(ROWS, COLS, device=device))),
        f"list_shape_{device}": _error(lambda: dist.all_gather(
            [torch.zeros(ROWS, COLS + 1, device=device) for _ in range(world)],
            torch.ones(ROWS, COLS, device=device))),
        f"dtype_{device}": _error(lambda: dist.reduce_scatter_tensor(
            torch.zeros(ROWS, COLS, device=device),
            torch.ones(world * ROWS, COLS, device=device, dtype=torch.float16))),
    }


def _cross_rank_mismatches(rank: int, device: str) -> dict[str, str | None]:
    """Ranks disagree on the shape or dtype: with TORCH_DISTRIBUTED_DEBUG=DETAIL, PyTorch's debug
    wrapper compares the ranks' collectives before any data moves (without it gloo aborts)."""
    dt = torch.float32 if rank == 0 else torch.float16
    return {
        f"across_shape_{device}": _error(lambda: dist.all_reduce(torch.ones(ROWS, COLS + rank, device=device))),
        f"across_dtype_{device}": _error(lambda: dist.all_reduce(torch.ones(ROWS, COLS, device=device, dtype=dt))),
    }


@scenario
def mismatches_then_stall(rank: int, world: int) -> dict[str, Any]:
    """Mismatched collectives on CPU and on spyre, then the last rank stalls past the timeout."""
    timeout = float(os.environ.get("DIST_TIMEOUT", "5"))
    init(rank, world, "gloo", seconds=timeout)
    out: dict[str, Any] = {}
    for device in ("cpu", "spyre"):
        out.update(_local_mismatches(world, device))
        out.update(_cross_rank_mismatches(rank, device))
    x = torch.ones(ROWS, COLS, device="spyre")
    dist.all_reduce(x)  # the group still works
    out["after"] = x.cpu()
    if rank == world - 1:
        time.sleep(timeout + 2)  # never joins the next collective
        os._exit(0)
    start = time.monotonic()
    out["stall"] = _error(lambda: dist.all_reduce(x))
    out["stall_seconds"] = time.monotonic() - start
    return out


@scenario
def rank_dies(rank: int, world: int) -> dict[str, Any]:
    """The last rank exits abruptly before a collective; the others must get an error, not hang."""
    init(rank, world, "gloo", seconds=float(os.environ.get("DIST_TIMEOUT", "10")))
    x = torch.ones(ROWS, COLS, device="spyre")
    dist.all_reduce(x)
    if rank == world - 1:
        os._exit(3)
    start = time.monotonic()
    err = _error(lambda: dist.all_reduce(x))
    return {"error": err, "seconds": time.monotonic() - start, "first": x.cpu()}


# -- training ------------------------------------------------------------------
STEPS = 5


def _model(width: int, hidden: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, width))


def _batches(rank: int, width: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(6, width, generator=g), torch.randn(6, width, generator=g)) for _ in range(STEPS)]


def train(wrap: Callable[[torch.nn.Module], torch.nn.Module], device: str, rank: int,
          width: int = 32, hidden: int = 64) -> dict[str, Any]:
    """Train ``wrap(model on device)`` for STEPS SGD steps; the losses and the final weights.

    The default sizes fill whole float32 sticks (32 elements); others leave parameters padded.
    """
    model = wrap(_model(width, hidden).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in _batches(rank, width):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    weights = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu()
               for k, v in model.state_dict().items()}
    return {"losses": torch.stack(losses), "weights": weights,
            "param_devices": sorted({str(p.device) for p in model.parameters()})}


def _fully_shard(mesh: Any) -> Callable[[torch.nn.Module], torch.nn.Module]:
    from torch.distributed.fsdp import fully_shard

    def wrap(model: torch.nn.Module) -> torch.nn.Module:
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    return wrap


@scenario
def training(rank: int, world: int) -> dict[str, Any]:
    """DDP, then FSDP2 (``fully_shard``), each on CPU and on spyre.

    One gloo group bound to this rank's device (``device_id=``); rank r trains on spyre:r
    where there are enough devices.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.parallel import DistributedDataParallel as DDP

    index = rank % torch.spyre.device_count()
    torch.spyre.set_device(index)
    init(rank, world, "gloo", device_id=torch.device("spyre", index))
    out = {"ddp": {"cpu": train(DDP, "cpu", rank),
                   "spyre": train(lambda m: DDP(m, device_ids=[index]), f"spyre:{index}", rank)}}
    if hasattr(torch.spyre, "Stream"):  # FSDP2 runs on the device's streams
        out["fsdp"] = {device: train(_fully_shard(init_device_mesh(device, (world,))), device, rank)
                       for device in ("cpu", "spyre")}
    return out


@scenario
def fsdp1(rank: int, world: int) -> dict[str, Any]:
    """FSDP1 ``FullyShardedDataParallel`` on CPU and on spyre."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    init(rank, world, "gloo")
    return {device: train(lambda m, device=device: FSDP(m, device_id=torch.device(device)), device, rank)
            for device in ("cpu", "spyre")}


@scenario
def fsdp_padded(rank: int, world: int) -> dict[str, Any]:
    """FSDP2 and FSDP1 on a model whose parameters do not fill whole sticks (Linear(10, 6), Linear(6, 10)):
    FSDP frees and re-allocates each padded parameter with ``untyped_storage().resize_``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    init(rank, world, "gloo")
    sizes = {"width": 10, "hidden": 6}
    return {"fsdp2": {device: train(_fully_shard(init_device_mesh(device, (world,))), device, rank, **sizes)
                      for device in ("cpu", "spyre")},
            "fsdp1": {device: train(lambda m, device=device: FSDP(m, device_id=torch.device(device)), device, rank,
                                    **sizes)
                      for device in ("cpu", "spyre")}}
