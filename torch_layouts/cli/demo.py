"""``demo``: real tensors through a layout of every family, device to device, and a model on the device.

1. Uploads tensors into Spyre (default and dim_order [1, 0, 2]), HTP crouton, TensorRT
   kCHW4 and kCHW32, MACE IN_OUT_CHANNEL and oneDNN nChw16c and OIhw4i16o4i layouts; prints each layout, its DMA
   program and the device memory it takes; checks the device memory holds every
   element where the layout's ``host_map`` says (padding = pad value) and that the
   tensor comes back bit for bit.
2. Relayouts device to device between families and checks each result against a
   direct upload into the same layout, byte for byte (padding included).
3. Trains a small MLP and an attention block one step on the device against the CPU.
4. Draws a picture of each layout into ``--out`` and checks no device memory leaked.

Exit status 1 when any check fails. Test hook: with the environment variable
``TORCH_LAYOUTS_DEMO_CORRUPT=1`` the demo flips the bits of one element of device
memory right after its first upload, so its checks must fail.
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .. import _C, device_memory, htp, mace, onednn, tensorrt
from ..core.dtypes import BITS_DTYPE
from ..core.layout import DeviceLayout
from ..spyre import SpyreTensorLayout
from .show import family_facts, program_text
from .specs import write_error

CORRUPT_ENV = "TORCH_LAYOUTS_DEMO_CORRUPT"

# The printouts Spyre's documentation shows for torch.rand(5, 100, 150, dtype=torch.float16) (Spyre tensor layouts doc).
DOCUMENTED_DEFAULT = ("SpyreTensorLayout(device_size=[100, 3, 5, 64], stride_map =[150, 64, 15000, 1], "
                "device_dtype=DataFormats.SEN169_FP16)")
DOCUMENTED_DIM_ORDER = ("SpyreTensorLayout(device_size=[5, 3, 100, 64], stride_map =[15000, 64, 150, 1], "
                  "device_dtype=DataFormats.SEN169_FP16)")


class Checks:
    """Named pass/fail results, printed as they come."""

    def __init__(self) -> None:
        self.results: list[tuple[str, bool]] = []

    def __call__(self, name: str, ok: bool, detail: str = "") -> bool:
        self.results.append((name, bool(ok)))
        print(f"    [{'ok' if ok else 'FAIL'}] {name}{f' ({detail})' if detail else ''}")
        return bool(ok)

    @property
    def failed(self) -> list[str]:
        return [name for name, ok in self.results if not ok]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(BITS_DTYPE[t.element_size()])


def expected_memory(x: torch.Tensor, layout: DeviceLayout) -> torch.Tensor:
    """Device memory as the layout prescribes it for host tensor ``x``, built from ``host_map`` alone."""
    host_map = layout.host_map(tuple(x.shape))
    values = x.contiguous().reshape(-1)[host_map.clamp(min=0)]
    return torch.where(host_map >= 0, values, torch.tensor(layout.pad_value, dtype=x.dtype))


def _holds(y: torch.Tensor, x: torch.Tensor) -> bool:
    layout = y.device_tensor_layout()
    return torch.equal(_bits(device_memory(y)), _bits(expected_memory(x, layout)))


def _mib(nbytes: int) -> str:
    return f"{nbytes} B ({nbytes / 2**20:.3f} MiB)"


def _corrupt(y: torch.Tensor) -> None:
    """Flip every bit of the first real element of ``y``'s device memory (the test hook)."""
    layout = y.device_tensor_layout()
    first = int(torch.nonzero(layout.host_map() >= 0)[0])
    _C._raw_buffer(y).view(BITS_DTYPE[layout.element_size])[first : first + 1].bitwise_not_()
    print(f"    ({CORRUPT_ENV} is set: flipped the bits of device element {first})")


def upload(name: str, x: torch.Tensor, spec: object | None, check: Checks, corrupt: bool = False,
           expected_text: str | None = None) -> torch.Tensor:
    """Move ``x`` to the device in ``spec`` (None = default layout), print and check it."""
    before = torch.spyre.memory_allocated()
    y = x.to("spyre") if spec is None else x.to("spyre", device_layout=spec)
    used = torch.spyre.memory_allocated() - before
    layout = y.device_tensor_layout()
    real = x.numel()
    print(f"\n  {name}: host {list(x.shape)} {str(x.dtype).removeprefix('torch.')}")
    print(f"    layout       {layout.describe()}")
    print(f"    device_size  {list(layout.device_size)}  stride_map {list(layout.stride_map)}")
    for key, value in family_facts(layout):
        print(f"    {key:<12} {value}")
    print(f"    memory       {layout.nbytes} B padded for {real * x.element_size()} B of data "
          f"({100 * real / layout.device_numel:.1f}% efficient); memory_allocated() grew by {used} B")
    print("    DMA program (H2D):")
    print("\n".join("      " + line for line in program_text(layout, "h2d", 9).splitlines()))
    if corrupt:
        _corrupt(y)
    if expected_text is not None:
        check("layout prints as in Spyre's documentation", str(layout) == expected_text)
    check("device memory holds every element where host_map says, padding = pad value", _holds(y, x))
    check("back to the host bit for bit", torch.equal(_bits(y.cpu()), _bits(x)))
    check("allocation covers the padded size", used >= layout.nbytes == y.untyped_storage().nbytes(),
          f"{used} >= {layout.nbytes}")
    return y


def relayout(label: str, y: torch.Tensor, spec: object, x: torch.Tensor, direct: torch.Tensor | None,
             check: Checks) -> torch.Tensor:
    """Relayout ``y`` (holding ``x``) into ``spec`` on the device; compare with a direct upload."""
    counters = _C._counters()
    z = y.to("spyre", device_layout=spec)
    after = _C._counters()
    moved = "device to device" if after["host_bounces"] == counters["host_bounces"] else "through the host"
    print(f"\n  {label}: {z.device_tensor_layout().describe()}")
    print(f"    moved {after['relayout_bytes'] - counters['relayout_bytes']} B {moved}")
    check("device memory holds every element where host_map says", _holds(z, x))
    if direct is not None:
        same = torch.equal(_bits(device_memory(z)), _bits(device_memory(direct)))
        check("same device bytes as a direct upload", same)
    check("back to the host bit for bit", torch.equal(_bits(z.cpu()), _bits(x)))
    return z


def stage_layouts(check: Checks, corrupt: bool) -> dict[str, DeviceLayout]:
    """Steps 1 and 2; returns the layouts to draw."""
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(5, 100, 150, generator=gen).half()  # the example of Spyre's documentation
    a = torch.randn(1, 3, 5, 30, generator=gen).half()  # NHWC (the HTP documentation's crouton example)
    b = torch.randn(2, 40, 5, 7, generator=gen).half()  # NCHW
    w = torch.randn(20, 40, 3, 3, generator=gen)  # conv weights {O, I, H, W}
    image = mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL)
    nchw16c = onednn.MemoryFormat("nChw16c")
    kchw4, kchw32 = tensorrt.TensorFormat.kCHW4, tensorrt.TensorFormat.kCHW32
    print("== 1. Host -> device -> host, one layout per family ==")
    ys = {
        "spyre": upload("Spyre default layout", s, None, check, corrupt, DOCUMENTED_DEFAULT),
        "spyre_dim_order": upload("Spyre dim_order [1, 0, 2]", s, SpyreTensorLayout(s.shape, s.dtype, [1, 0, 2]),
                                  check, expected_text=DOCUMENTED_DIM_ORDER),
        "htp_crouton": upload("HTP R4CroutonLayout", a, htp.R4CroutonLayout, check),
        "trt_kCHW4": upload("TensorRT kCHW4", b, kchw4, check),
        "trt_kCHW32": upload("TensorRT kCHW32", b, kchw32, check),
        "mace_in_out_channel": upload("MACE IN_OUT_CHANNEL image", a, image, check),
        "onednn_nChw16c": upload("oneDNN nChw16c (C padded to 48 with zeros)", b, nchw16c, check),
        "onednn_OIhw4i16o4i": upload("oneDNN OIhw4i16o4i weights", w, onednn.MemoryFormat("OIhw4i16o4i"), check),
    }
    print(f"\n  device memory in use: {_mib(torch.spyre.memory_allocated())}")

    print("\n== 2. Device -> device relayouts between families ==")
    z = relayout("HTP crouton -> MACE IN_OUT_CHANNEL", ys["htp_crouton"], image, a, ys["mace_in_out_channel"], check)
    z = relayout("MACE IN_OUT_CHANNEL -> Spyre default", z, SpyreTensorLayout(a.shape, a.dtype), a, None, check)
    relayout("Spyre default -> HTP crouton", z, htp.R4CroutonLayout, a, ys["htp_crouton"], check)
    z = relayout("TensorRT kCHW4 -> kCHW32", ys["trt_kCHW4"], kchw32, b, ys["trt_kCHW32"], check)
    z = relayout("TensorRT kCHW32 -> Spyre dim_order [1, 0, 2, 3]", z,
                 SpyreTensorLayout(b.shape, b.dtype, [1, 0, 2, 3]), b, None, check)
    relayout("Spyre dim_order [1, 0, 2, 3] -> TensorRT kCHW4", z, kchw4, b, ys["trt_kCHW4"], check)
    z = relayout("TensorRT kCHW4 -> oneDNN nChw16c", ys["trt_kCHW4"], nchw16c, b, ys["onednn_nChw16c"], check)
    relayout("oneDNN nChw16c -> TensorRT kCHW32", z, kchw32, b, ys["trt_kCHW32"], check)
    relayout("Spyre default -> Spyre dim_order [1, 0, 2]", ys["spyre"], ys["spyre_dim_order"].device_tensor_layout(),
             s, ys["spyre_dim_order"], check)
    print(f"\n  peak device memory so far: {_mib(torch.spyre.max_memory_allocated())}")
    return {name: y.device_tensor_layout() for name, y in ys.items()}


Loss = Callable[[torch.nn.Module, str], torch.Tensor]  # a model's loss on its inputs moved to a device


def _train_step(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module], torch.Tensor]) -> torch.Tensor:
    loss = loss_fn(model)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    return loss.detach()


def _compare_models(name: str, cpu_model: torch.nn.Module, loss_fn: Loss, check: Checks) -> None:
    dev_model = copy.deepcopy(cpu_model).to("spyre")
    first = next(dev_model.parameters())
    print(f"\n  {name}: first weight {list(first.shape)} in {first.device_tensor_layout()}")
    cpu_loss = _train_step(cpu_model, lambda m: loss_fn(m, "cpu"))
    dev_loss = _train_step(dev_model, lambda m: loss_fn(m, "spyre"))
    print(f"    loss cpu {cpu_loss.item():.6f}, spyre {dev_loss.cpu().item():.6f}")
    check("same loss", torch.allclose(dev_loss.cpu(), cpu_loss, rtol=1e-5, atol=1e-6))
    pairs = list(zip(dev_model.named_parameters(), cpu_model.parameters()))
    check("same gradients", all(torch.allclose(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-6) for (_, d), c in pairs))
    check("same weights after an SGD step",
          all(torch.allclose(d.cpu(), c, rtol=1e-5, atol=1e-6) for (_, d), c in pairs))
    check("parameters and gradients live on spyre",
          all(d.device.type == "spyre" and d.grad.device.type == "spyre" for (_, d), _ in pairs))


def demo_models() -> list[tuple[str, torch.nn.Module, Loss]]:
    """The demo's small models on the CPU, each with its loss on inputs moved to a device.

    >>> name, model, loss = demo_models()[0]
    >>> loss(model, "cpu").backward()
    """
    torch.manual_seed(0)
    x, target = torch.randn(32, 64), torch.randint(0, 10, (32,))
    x_layout = SpyreTensorLayout((32, 64), torch.float32, [1, 0])  # the batch dim in the sticks

    def mlp_loss(model: torch.nn.Module, device: str) -> torch.Tensor:
        inp = x if device == "cpu" else x.to("spyre", device_layout=x_layout)
        return torch.nn.functional.cross_entropy(model(inp), target.to(device))

    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    q = torch.randn(2, 6, 16)

    def attention_loss(model: torch.nn.Module, device: str) -> torch.Tensor:
        inp = q.to(device)
        out, _ = model(inp, inp, inp)
        return out.square().mean()

    attention = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    return [("2-layer MLP (input in Spyre dim_order [1, 0])", mlp, mlp_loss),
            ("attention block (nn.MultiheadAttention, 2 heads)", attention, attention_loss)]


def stage_models(check: Checks) -> None:
    """Step 3: one training step of small models on the device against the CPU."""
    print("\n== 3. Models on the device (forward, backward, SGD step) against the CPU ==")
    for name, model, loss in demo_models():
        _compare_models(name, model, loss, check)
    counts = _C._fallback_counts()
    print(f"\n  ops run through the CPU fallback: {sum(counts.values())} calls of {len(counts)} ops")


def stage_compile(check: Checks) -> None:
    """Step 4: models through ``torch.compile`` on the device, with the compiler's report."""
    from ..compile.demo import demo_cases  # Dynamo loads only for this step

    print("\n== 4. torch.compile on the device: chosen layouts, restickifies, DCIs and SuperDSCs ==")
    for title, same, report in demo_cases():
        print(f"\n  compiled {title}:")
        print("\n".join("    " + line for line in str(report).splitlines()))
        check(f"compiled {title} equals eager", same)
        check(f"compiled {title}: restickify plan proven optimal", report.optimal,
              f"{report.cost_bytes} B moved by {len(report.restickifies)} restickifies")
    torch._dynamo.reset()  # compiled graphs hold the models' parameters until their cache is dropped


def draw_pictures(layouts: dict[str, DeviceLayout], out: Path) -> None:
    from .. import viz  # matplotlib loads only for pictures

    print(f"\n== 5. Pictures in {out}/ ==")
    try:
        for name, layout in layouts.items():
            path = out / f"{name}.png"
            viz.draw(layout, path)
            print(f"  {path}  ({layout.describe()})")
    except OSError as err:
        raise write_error(out, err) from None


def run(args: argparse.Namespace) -> int:
    """The ``demo`` subcommand."""
    start = time.perf_counter()
    out = Path(args.out)
    if not args.no_pictures:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise write_error(out, err) from None
    check = Checks()
    gc.collect()
    baseline = torch.spyre.memory_allocated()
    _C._reset_stats()
    print(f"torch_layouts demo on {torch.spyre.get_device_name()}; device memory in use: {_mib(baseline)}")
    layouts = stage_layouts(check, corrupt=bool(os.environ.get(CORRUPT_ENV)))
    stage_models(check)
    stage_compile(check)
    gc.collect()
    print()
    check("every device tensor freed: memory_allocated() back to its start",
          torch.spyre.memory_allocated() == baseline, f"{torch.spyre.memory_allocated()} B vs {baseline} B")
    if not args.no_pictures:
        draw_pictures(layouts, out)
    peak = torch.spyre.max_memory_allocated()
    print(f"\n== Summary: {len(check.results)} checks, {len(check.failed)} failed; peak device memory {_mib(peak)}; "
          f"{time.perf_counter() - start:.1f} s ==")
    for name in check.failed:
        print(f"  FAILED: {name}")
    return 1 if check.failed else 0
