"""DMA benchmarks: every copy against memcpy and against its PyTorch peer; latency, planning, memory.

Copies, for every layout family, dtype and size (host bytes ~1, 32, 512 MiB), into
preallocated tensors: H2D ``dev.copy_(host)``, D2H ``host.copy_(dev)`` and D2D
``dev.copy_(src)`` from a row-major device tensor (for Spyre dim_order [1,0]: from the default
Spyre layout, a restickify). Each runs interleaved with (a) memcpy: ``dst.copy_(src)`` of the
same host bytes between two flat CPU buffers (as uint8), and (b) its PyTorch peer: the same nests (the
layout's DMA program, or the relayout's) as strided view copies between flat CPU buffers
(``dma.execute.run_transfers``). Goals: ours / memcpy <= 1.15 where every nest moves contiguous
runs of >= 64 bytes on both sides ("runs"), <= 1.3 where it transposes; ours / peer <= 1.0.
Each thread count runs in its own process (``torch.set_num_threads`` before any work); 1 MiB
figures take 3x ``--repeat`` samples, 512 MiB figures a third (at least 3). Below 256 MiB each
timed copy follows three untimed runs of the same copy (``common.compare_copy``), so that each is
timed as a loop of it runs, on buffers of its own (memcpy included).

    python benchmarks/bench_dma.py [--full] [--threads 1,2,16] [--repeat N] [--only TEXT]

Default: 2 threads (or all, if fewer), 1 and 32 MiB, and the 512 MiB case ``BIG``; ``--full``:
every size at 1, 2 and all threads.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make the repository and this folder importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_layouts  # noqa: E402
from torch_layouts import _C, DeviceLayout, SpyreTensorLayout, htp, mace, onednn, tensorrt  # noqa: E402
from torch_layouts.core.layout import _resolve  # noqa: E402
from torch_layouts.core.mapping import Transfer  # noqa: E402
from torch_layouts.dma.execute import run_transfers  # noqa: E402
from torch_layouts.dma.program import _program  # noqa: E402
from torch_layouts.dma.relayout import relayout_transfers  # noqa: E402

try:
    from .common import WARM_BYTES, CopyFigure, Figure, compare_copy, compare_latency, copy_table
except ImportError:  # run as a script
    from common import WARM_BYTES, CopyFigure, Figure, compare_copy, compare_latency, copy_table  # noqa: E402

F16, F32, I8, FP8 = torch.float16, torch.float32, torch.int8, torch.float8_e4m3fn
SIZES_MIB = (1, 32, 512)
RUN_BYTES = 64  # a nest "runs" when its innermost contiguous run is this long on both sides
Spec = Callable[[tuple[int, ...], torch.dtype], object]  # host shape, dtype -> layout or template


def _fixed(template: object) -> Spec:
    return lambda shape, dtype: template


def _spyre(dim_order: list[int] | None = None) -> Spec:
    return lambda shape, dtype: SpyreTensorLayout(shape, dtype, dim_order)


@dataclass(frozen=True)
class Case:
    """A family's layout over host shapes with one free dim (0 in ``shape``), scaled to a byte size."""

    family: str
    dtypes: tuple[torch.dtype, ...]
    shape: tuple[int, ...]
    spec: Spec
    multiple: int = 1  # the free dim is a multiple of this (the layout's tile along it)
    d2d_source: tuple[str, Spec] | None = None  # the D2D copy's source layout (default: row-major)

    def host_shape(self, nbytes: int, dtype: torch.dtype) -> tuple[int, ...]:
        per = math.prod(n for n in self.shape if n) * dtype.itemsize
        free = max(self.multiple, round(nbytes / per / self.multiple) * self.multiple)
        return tuple(n or free for n in self.shape)


TF = tensorrt.TensorFormat
CASES = (
    Case("Spyre default", (F16, F32, I8, FP8), (0, 2048), _spyre(), 128),
    Case("Spyre dim_order [1,0]", (F16, F32), (0, 2048), _spyre([1, 0]), 128, ("Spyre default", _spyre())),
    Case("HTP crouton", (F16, F32), (1, 0, 128, 256), _fixed(htp.R4CroutonLayout), 8),
    Case("TensorRT kCHW2", (F16,), (1, 256, 0, 256), _fixed(TF.kCHW2)),
    Case("TensorRT kCHW4", (F16,), (1, 256, 0, 256), _fixed(TF.kCHW4)),
    Case("TensorRT kCHW16", (F16,), (1, 256, 0, 256), _fixed(TF.kCHW16)),
    Case("TensorRT kCHW32", (F16, F32), (1, 256, 0, 256), _fixed(TF.kCHW32)),
    Case("TensorRT kCDHW32", (F16,), (1, 64, 0, 64, 64), _fixed(TF.kCDHW32)),
    Case("TensorRT kHWC8", (F16,), (1, 256, 0, 256), _fixed(TF.kHWC8)),
    Case("MACE IN_OUT_CHANNEL", (F16, F32), (1, 0, 256, 256), _fixed(mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL))),
    Case("MACE CONV2D_FILTER", (F16, F32), (0, 8192, 3, 3), _fixed(mace.ImageLayout(mace.BufferType.CONV2D_FILTER)), 4),
    Case("oneDNN nchw", (F32,), (1, 256, 0, 256), _fixed(onednn.MemoryFormat("nchw"))),
    Case("oneDNN nhwc", (F16, F32), (1, 256, 0, 256), _fixed(onednn.MemoryFormat("nhwc"))),
    Case("oneDNN nChw16c", (F16, F32), (1, 256, 0, 256), _fixed(onednn.MemoryFormat("nChw16c"))),
    Case("oneDNN OIhw16i16o", (F32,), (0, 256, 3, 3), _fixed(onednn.MemoryFormat("OIhw16i16o")), 16),
)
BIG = ("TensorRT kCHW32", F16)  # the one 512 MiB case of the default run (all three directions)


def dtype_name(dtype: torch.dtype) -> str:
    return {F16: "fp16", F32: "fp32", I8: "int8", FP8: "fp8e4m3"}.get(dtype, str(dtype).removeprefix("torch."))


def row_major(shape: tuple[int, ...], dtype: torch.dtype) -> DeviceLayout:
    """A device layout that keeps host order (the device buffer is the contiguous host tensor)."""
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    return DeviceLayout(shape, strides, dtype)


def run_bytes(t: Transfer, element_size: int) -> int:
    """Bytes of the longest innermost run that is contiguous on both sides of a nest."""
    run = 1
    for n, d, s in zip(reversed(t.ranges), reversed(t.dst_strides), reversed(t.src_strides)):
        if n == 1:
            continue
        if d != run or s != run:
            break
        run *= n
    return run * element_size


def kind(transfers: Sequence[Transfer], element_size: int) -> str:
    """"runs" when every nest moves contiguous runs of >= RUN_BYTES on both sides, else "transposes"."""
    return "runs" if all(run_bytes(t, element_size) >= RUN_BYTES for t in transfers) else "transposes"


def measure(case: Case, dtype: torch.dtype, mib: int, threads: int, repeat: int) -> list[CopyFigure]:
    """H2D, D2H and D2D figures of one case at one size, all buffers preallocated."""
    shape = case.host_shape(mib * 2**20, dtype)
    host = torch.empty(shape, dtype=dtype)
    host.view(torch.uint8).fill_(0x3C)  # touch every page; a finite value in every dtype
    dev = torch.empty(shape, dtype=dtype, device="spyre", device_layout=case.spec(shape, dtype))
    source_name, source_spec = case.d2d_source or ("row-major", row_major)
    src = torch.empty(shape, dtype=dtype, device="spyre", device_layout=source_spec(shape, dtype))
    src.copy_(host)
    layout, src_layout = dev.device_tensor_layout(), src.device_tensor_layout()
    flat = host.view(-1)
    image = torch.empty(layout.device_numel, dtype=dtype)  # the peer's device buffer
    src_image = flat if case.d2d_source is None else torch_layouts.device_memory(src)
    h2d = torch_layouts.dma_program(layout, shape).transfers()
    d2h = torch_layouts.dma_program(layout, shape, direction="d2h").transfers()
    relayout = relayout_transfers(src_layout, layout, shape)
    # As bytes: PyTorch copies float8 element by element (1 MiB: 22 us against 12 as uint8). Timed
    # warm, memcpy has buffers of its own, as ours and the peer have: sharing the peer's, it found
    # them in the cache the peer had just filled (this VM's L3 holds 32 MiB copies: a plain 32 MiB
    # copy measured 1.2-1.4x its peer that way, all three alike in a loop). At 512 MiB nothing
    # stays in cache, and it spares 1 GiB.
    nbytes = flat.numel() * flat.element_size()
    if nbytes < WARM_BYTES:
        memcpy_src, memcpy_dst = torch.full((nbytes,), 0x3C, dtype=torch.uint8), torch.zeros(nbytes, dtype=torch.uint8)
    else:
        memcpy_dst, memcpy_src = image[:flat.numel()].view(torch.uint8), flat.view(torch.uint8)

    def memcpy() -> None:
        memcpy_dst.copy_(memcpy_src)

    def d2d_peer() -> None:
        if relayout is not None:
            run_transfers(relayout, image, src_image)
        else:  # no direct nests: through a host buffer, as the runtime does
            run_transfers(torch_layouts.dma_program(src_layout, shape, direction="d2h").transfers(), flat, src_image)
            run_transfers(h2d, image, flat)

    torch_layouts.reset_stats()
    dev.copy_(src)
    bounced = torch_layouts.stats()["host_bounces"] > 0
    padded = layout.device_numel / flat.numel()
    note = f"device buffer {padded:.2f}x host bytes" if padded > 1.001 else ""
    label = f"{case.family} {dtype_name(dtype)} {'x'.join(map(str, shape))}"
    # The first calls of a repeated copy try tile shapes (docs/design.md, "Tile tuning"): warm-up
    # covers them, interleaved as the timed calls are (the cache a trial meets is theirs); at
    # 512 MiB nothing stays in cache, so the trials run alone.
    trials = _C._tile_trial_calls()
    if mib >= 256:
        reps, warmup = max(3, repeat // 3), 1
    else:  # small copies are cheap: more samples against a loaded machine
        reps, warmup = (3 * repeat if mib <= 4 else repeat), 2 + trials
    plans = [
        ("H2D", f"H2D {label}", kind(h2d, host.element_size()), lambda: dev.copy_(host),
         lambda: run_transfers(h2d, image, flat), note),
        ("D2H", f"D2H {label}", kind(d2h, host.element_size()), lambda: host.copy_(dev),
         lambda: run_transfers(d2h, flat, image), note),
        ("D2D", f"D2D {source_name} -> {label}",
         kind(relayout if relayout is not None else h2d, host.element_size()), lambda: dev.copy_(src), d2d_peer,
         "; ".join(filter(None, [note, "through the host" if bounced else ""]))),
    ]
    figures = []
    for direction, name, how, ours, peer, why in plans:
        for _ in range(trials if mib >= 256 else 0):
            ours()
        figure = compare_copy(name, direction, how, threads, nbytes, ours, memcpy, peer, reps, warmup, why)
        print(f"  {figure.name} [{figure.threads} thr, {figure.mib:.3g} MiB]: {figure.ours_ms:.2f} ms, "
              f"/memcpy {figure.vs_memcpy:.2f}, /peer {figure.vs_peer:.2f}", file=sys.stderr, flush=True)
        figures.append(figure)
    return figures


def worker(threads: int, sizes: Sequence[int], big: bool, repeat: int, only: str | None) -> list[CopyFigure]:
    """Every case at ``sizes`` (and ``BIG`` at 512 MiB if ``big``), in this process at ``threads`` threads."""
    torch.set_num_threads(threads)
    wanted = [(c, d) for c in CASES for d in c.dtypes if not only or only.lower() in f"{c.family} {dtype_name(d)}".lower()]
    runs = [(c, d, mib) for mib in sizes for c, d in wanted]
    if big:
        runs += [(c, d, SIZES_MIB[-1]) for c, d in wanted if (c.family, d) == BIG]
    figures = []
    for case, dtype, mib in runs:
        figures += measure(case, dtype, mib, threads, repeat)
        gc.collect()  # free this case's buffers (host, device, peer: up to 2 GiB at 512 MiB) before the next
        torch.spyre.empty_cache()
    return figures


def thread_counts(full: bool, threads: Sequence[int] | None) -> list[int]:
    cores = len(os.sched_getaffinity(0))
    return sorted(set(threads or ((1, 2, cores) if full else (min(2, cores),))))


def copies(repeat: int = 15, full: bool = False, threads: Sequence[int] | None = None,
           only: str | None = None) -> list[CopyFigure]:
    """The copy figures, one process per thread count (default run, or ``full``: every size at 1, 2, all)."""
    fields = {f.name for f in dataclasses.fields(CopyFigure)}
    figures = []
    for n in thread_counts(full, threads):
        sizes = SIZES_MIB if full else SIZES_MIB[:2]
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--threads", str(n), "--repeat",
               str(repeat), "--sizes", ",".join(map(str, sizes))] + ([] if full else ["--big"])
        if only:
            cmd += ["--only", only]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True,
                             env={**os.environ, "OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n)})
        figures += [CopyFigure(**{k: v for k, v in d.items() if k in fields}) for d in json.loads(out.stdout)]
    return figures


def latency() -> list[Figure]:
    small = torch.randn(4, 4)
    return [compare_latency("4x4 x.to('spyre') latency", 10, lambda: small.to("spyre"), small.clone, "x.clone()")]


def program_generation() -> list[Figure]:
    """Time to generate a DMA program for a rank-6 layout, cold and cached (target < 1 ms)."""
    layout = SpyreTensorLayout((3, 5, 7, 9, 11, 130), torch.float16, [2, 0, 4, 1, 3, 5])
    times = []
    for _ in range(20):
        _program.cache_clear()
        _resolve.cache_clear()
        start = time.perf_counter()
        torch_layouts.dma_program(layout, (3, 5, 7, 9, 11, 130))
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(1000):
        torch_layouts.dma_program(layout, (3, 5, 7, 9, 11, 130))
    cached = (time.perf_counter() - start) / 1000
    cold = min(times)
    return [Figure("dma_program generation, rank-6 layout (ms; target < 1 ms)", 1.0, cold * 1e3, cold * 1e3,
                   cold * 1e3, 1.0, "1 ms", f"cold {cold * 1e3:.3f} ms, cached {cached * 1e6:.1f} us")]


_RSS_PROBE = """
import torch, torch_layouts

def high_water_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

x = torch.randn(4096, 4096, dtype=torch.float16)
torch.randn(4, 4, dtype=torch.float16).to("spyre").cpu()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak RSS to the current RSS
before = high_water_kib()
y = x.to("spyre")
print((high_water_kib() - before) * 1024 / (x.numel() * x.element_size()))
"""


def peak_rss_growth() -> list[Figure]:
    """Peak RSS growth of one x.to("spyre") in a fresh process, in units of the tensor's size."""
    out = subprocess.run([sys.executable, "-c", _RSS_PROBE], capture_output=True, text=True, check=True)
    growth = float(out.stdout.strip().splitlines()[-1])
    return [Figure("peak RSS growth of x.to('spyre'), in tensor sizes (device buffer = 1)", 2.0, growth, growth,
                   growth, 1.0, "tensor bytes", "O(1) temporaries: at most one extra buffer")]


def run() -> list[Figure]:
    """The figures besides the copy matrix: small-copy latency, program generation, peak RSS."""
    return latency() + program_generation() + peak_rss_growth()


def ints(text: str) -> list[int]:
    """Comma-separated positive integers (``--threads``, ``--sizes``)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="every size at 1, 2 and all threads")
    parser.add_argument("--threads", type=ints, help="thread counts, e.g. 1,2,16 (default: 2; --full: 1,2,all)")
    parser.add_argument("--repeat", type=int, default=15, help="timed repetitions per figure (512 MiB: a third)")
    parser.add_argument("--only", help="cases whose 'family dtype' contains this text (e.g. kCHW32 or fp32)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=ints, default=list(SIZES_MIB[:2]), help=argparse.SUPPRESS)
    parser.add_argument("--big", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if not args.threads:
            parser.error("--worker needs --threads")
        figures = worker(args.threads[0], args.sizes, args.big, args.repeat, args.only)
        print(json.dumps([f.as_dict() for f in figures]))
        return 0
    print(copy_table(copies(args.repeat, args.full, args.threads, args.only)))
    print(json.dumps([f.as_dict() for f in run()], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
