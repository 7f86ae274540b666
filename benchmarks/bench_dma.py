"""DMA benchmarks: host<->device copies per family, device relayout, small-copy latency,
program generation time and the memory a copy to the device costs."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import torch

import torch_layouts
from torch_layouts import SpyreTensorLayout, htp, mace, tensorrt
from torch_layouts.core.layout import _resolve
from torch_layouts.dma.execute import execute
from torch_layouts.dma.program import _program

try:
    from .common import Figure, compare, compare_latency
except ImportError:  # run as a script
    from common import Figure, compare, compare_latency

FAMILIES = [  # (name, host shape, layout spec); ~32 MiB of float16 each
    ("HTP crouton 1x256x256x256", (1, 256, 256, 256), htp.R4CroutonLayout),
    ("TensorRT kCHW32 1x256x256x256", (1, 256, 256, 256), tensorrt.TensorFormat.kCHW32),
    ("MACE IN_OUT_CHANNEL 1x256x256x256", (1, 256, 256, 256), mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL)),
]


def copies(repeat: int) -> list[Figure]:
    x = torch.randn(4096, 4096, dtype=torch.float16)
    y = x.to("spyre")
    figures = [
        compare("H2D 4096x4096 fp16, default Spyre", 1.3, lambda: x.to("spyre"), x.clone, "x.clone()", repeat),
        compare("D2H 4096x4096 fp16, default Spyre", 1.3, y.cpu, x.clone, "x.clone()", repeat),
    ]
    for name, shape, spec in FAMILIES:
        h = torch.randn(shape, dtype=torch.float16)
        d = h.to("spyre", device_layout=spec)
        figures.append(compare(f"H2D {name}", 1.5, lambda h=h, spec=spec: h.to("spyre", device_layout=spec),
                               h.clone, "x.clone()", repeat))
        figures.append(compare(f"D2H {name}", 1.5, d.cpu, h.clone, "x.clone()", repeat))
    transposed = SpyreTensorLayout((4096, 4096), torch.float16, [1, 0])
    figures.append(compare("D2D restickify 4096x4096 fp16, dim_order [0,1] -> [1,0]", 1.5,
                           lambda: y.to("spyre", device_layout=transposed), x.clone, "x.clone()", repeat))
    small = torch.randn(4, 4)
    figures.append(compare_latency("4x4 x.to('spyre') latency", 10, lambda: small.to("spyre"), small.clone,
                                   "x.clone()"))
    return figures


def executors(repeat: int) -> list[Figure]:
    """The DMA program alone, between flat buffers allocated once: the C++ executor the runtime
    uses and the Python reference executor (as_strided + copy_), against x.clone()."""
    x = torch.randn(4096, 4096, dtype=torch.float16)
    layout = SpyreTensorLayout((4096, 4096), torch.float16)
    h2d, d2h = torch_layouts.dma_program(layout), torch_layouts.dma_program(layout, direction="d2h")
    host, device, back = x.reshape(-1), torch.empty(layout.device_numel, dtype=torch.float16), torch.empty_like(x)
    plain = torch.empty_like(host)
    nests_in = [tuple(t) for t in h2d.transfers()]
    nests_out = [tuple(t) for t in d2h.transfers()]
    bits = torch.int16
    return [
        compare("C++ executor H2D 4096x4096 fp16 (preallocated buffers)", 1.3,
                lambda: torch_layouts._C._run_nests(nests_in, device.view(bits), host.view(bits)), x.clone,
                "x.clone()", repeat),
        compare("C++ executor D2H 4096x4096 fp16 (preallocated buffers)", 1.3,
                lambda: torch_layouts._C._run_nests(nests_out, back.view(-1).view(bits), device.view(bits)),
                x.clone, "x.clone()", repeat),
        compare("C++ executor H2D / plain copy_ of the same bytes (both preallocated)", None,
                lambda: torch_layouts._C._run_nests(nests_in, device.view(bits), host.view(bits)),
                lambda: plain.copy_(host), "dst.copy_(src)", repeat),
        compare("C++ executor D2H / plain copy_ of the same bytes (both preallocated)", None,
                lambda: torch_layouts._C._run_nests(nests_out, back.view(-1).view(bits), device.view(bits)),
                lambda: plain.copy_(host), "dst.copy_(src)", repeat),
        compare("reference executor H2D 4096x4096 fp16 (dma.execute)", 1.3, lambda: execute(h2d, host, device),
                x.clone, "x.clone()", repeat),
        compare("reference executor D2H 4096x4096 fp16 (dma.execute)", 1.3,
                lambda: execute(d2h, back.view(-1), device), x.clone, "x.clone()", repeat),
    ]


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


def run(repeat: int = 15) -> list[Figure]:
    return copies(repeat) + executors(repeat) + program_generation() + peak_rss_growth()


if __name__ == "__main__":
    print(json.dumps([f.as_dict() for f in run()], indent=2))
