"""The runtime's run-by-run float32 add, sub, mul and div (``csrc/arithmetic_runs.cpp``, bound as
``_C._arithmetic_runs``), which the replays use where an operand is broadcast inside the dims it
varies along, and for every float32 add, sub, mul and div replayed (a Python number or a 0-dim
tensor operand included): on any strided views it takes, ATen's bits (infinities, NaNs and signed
zeros included), in place too; the views it declines are left untouched."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import ISA_SETS, kernels_in, padding_holds_pad_value
from torch_layouts import _C
from torch_layouts.ops import elementwise

OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 1e-40, 3.4e38]


def values(n: int, gen: torch.Generator) -> torch.Tensor:
    """n float32 values, a quarter of them special (NaN, infinities, zeros, subnormal, huge)."""
    pool = torch.tensor(SPECIAL, dtype=torch.float32)
    special = pool[torch.randint(0, len(SPECIAL), (n,), generator=gen)]
    return torch.where(torch.rand(n, generator=gen) < 0.25, special, torch.randn(n, generator=gen))


def strided(shape: list[int], order: list[int], gen: torch.Generator, broadcast: frozenset = frozenset(),
            gaps: int = 0) -> torch.Tensor:
    """A view of ``shape`` whose dims lie in memory in ``order`` (outermost first), of stride 0
    along the dims in ``broadcast``, with a gap of one element after each dim whose bit is set in
    ``gaps`` (dims that then do not continue each other)."""
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        if d in broadcast:
            continue
        strides[d] = step
        step *= shape[d] + (gaps >> d & 1)
    return values(step, gen).as_strided(shape, strides)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


@pytest.mark.parametrize("isa", ISA_SETS)
@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=4), st.sampled_from(sorted(OPS)), st.data())
def test_any_views_it_takes_give_atens_bits(isa, shape, name, data):
    """Random shapes, dim orders and broadcast dims (either operand's, the run's included): where
    the kernel takes the views it writes ATen's bits into out, in place or not; where it declines
    out is untouched; in each instruction set's kernels this CPU runs."""
    with kernels_in(_C._set_isa_tables, isa):  # each instruction set's tables
        shape[-1] = data.draw(st.sampled_from([8, 16, 32, 37, 64]))  # a run the kernel can take
        gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
        order = list(data.draw(st.permutations(range(len(shape)))))
        order.remove(len(shape) - 1)
        order.append(len(shape) - 1)  # out's stride-1 dim: the last
        side = data.draw(st.sampled_from(["self", "other"]))
        broadcast = frozenset(data.draw(st.sets(st.integers(0, len(shape) - 1))))
        gaps = data.draw(st.integers(0, 15))
        x = strided(shape, order, gen, broadcast if side == "self" else frozenset(), gaps)
        y = strided(shape, list(data.draw(st.permutations(range(len(shape))))), gen,
                    broadcast if side == "other" else frozenset(), data.draw(st.integers(0, 15)))
        in_place = side == "other" and data.draw(st.booleans())  # x has no stride-0 dim then
        out = x if in_place else strided(shape, order, gen, frozenset(), data.draw(st.integers(0, 15)))
        before = out.clone()
        expected = OPS[name](x, y)
        took = _C._arithmetic_runs(name, x, y, out)
        if took:
            assert torch.equal(bits(out), bits(expected))
        else:
            assert torch.equal(bits(out), bits(before))
        assert took == (y.stride(-1) in (0, 1) and 1 in (x.stride(-1), y.stride(-1)))


@pytest.mark.parametrize("isa", ISA_SETS)
@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=4), st.sampled_from(sorted(OPS)),
       st.sampled_from([torch.float32, torch.float64, torch.int64]), st.booleans(), st.data())
def test_a_number_operand_gives_atens_bits(isa, shape, name, number_dtype, number_first, data):
    """A 0-dim CPU operand (a Python number, as ATen wraps it, or a 0-dim tensor) on either side of
    a strided view: one number for every element, cast to float32 as ATen casts it; ATen's bits,
    in each instruction set's kernels this CPU runs."""
    with kernels_in(_C._set_isa_tables, isa):  # each instruction set's tables
        shape[-1] = data.draw(st.sampled_from([8, 16, 37, 64]))
        gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
        x = strided(shape, list(range(len(shape))), gen, gaps=data.draw(st.integers(0, 15)))
        integers = st.integers(-2**40, 2**40)
        value = data.draw(integers if number_dtype == torch.int64 else
                          st.sampled_from(SPECIAL) | st.floats(-1e6, 1e6, width=32) | integers)
        number = torch.tensor(value, dtype=number_dtype)
        a, b = (number, x) if number_first else (x, number)
        out = torch.empty(x.shape)
        assert _C._arithmetic_runs(name, a, b, out)
        assert torch.equal(bits(out), bits(OPS[name](a, b)))
        if not number_first and number_dtype != torch.int64:  # the Python number itself, as ATen wraps it
            assert torch.equal(bits(out), bits(OPS[name](x, value)))


# id, a device op with a number operand (the replays run it by kernel), its operand's dtype.
NUMBER_OPS = [
    ("times-float", lambda x: x * 0.3535533905932738, torch.float32),
    ("div-int", lambda x: x / 3, torch.float32),
    ("rsub-float", lambda x: 2.5 - x, torch.float32),
    ("plus-int", lambda x: x + 1, torch.float32),
    ("minus-0-dim-tensor", lambda x: x - torch.tensor(2.0), torch.float32),
    ("mul-scalar-overload", lambda x: torch.ops.aten.mul.Scalar(x, 2.0), torch.float32),
    ("div-out", lambda x: torch.div(x, 7.0, out=torch.empty_like(x)), torch.float32),
    ("in-place-mul", lambda x: x.mul_(0.5), torch.float32),
    ("in-place-div", lambda x: x.div_(0.1), torch.float32),
    ("add-alpha", lambda x: torch.add(x, 1.5, alpha=2), torch.float32),  # alpha not 1: ATen's loop
    ("half", lambda x: x * 0.3535, torch.float16),  # not float32: ATen's loop
]


@pytest.mark.parametrize("_, fn, dtype", NUMBER_OPS, ids=[c[0] for c in NUMBER_OPS])
def test_device_ops_with_a_number_give_the_cpus_bits(_, fn, dtype):
    """Padded views of Spyre's default layout (16 of each 32-float stick real), special values
    among them: the CPU's bits, call after call, the padding the pad value."""
    elementwise.forget_recipes()
    for seed in range(3):
        host = values(2 * 6 * 16, torch.Generator().manual_seed(seed)).view(2, 6, 16).to(dtype)
        out, expected = fn(host.to("spyre")), fn(host.clone())
        assert out.dtype == expected.dtype
        assert torch.equal(out.cpu().view(torch.int16 if dtype == torch.float16 else torch.int32),
                           expected.view(torch.int16 if dtype == torch.float16 else torch.int32))
        assert padding_holds_pad_value(out)
    with torch_layouts.strict_layouts():
        assert torch.equal(fn(host.to("spyre")).cpu().view(torch.uint8), fn(host.clone()).view(torch.uint8))


def test_a_bias_over_spyres_3d_layout():
    """The case it is for: x + bias in the coordinates of Spyre's default (8, 128, 256) float32
    layout, (tokens, stick columns, batch, stick); and bias - x, and in place."""
    gen = torch.Generator().manual_seed(0)
    x = values(128 * 8 * 8 * 32, gen).as_strided((128, 8, 8, 32), (2048, 256, 32, 1))
    bias = values(256, gen).as_strided((128, 8, 8, 32), (0, 32, 0, 1))
    for name, op in OPS.items():
        for a, b in ((x, bias), (bias, x)):
            out = torch.empty(128 * 8 * 8 * 32).as_strided(x.shape, x.stride())
            assert _C._arithmetic_runs(name, a, b, out)
            assert torch.equal(bits(out), bits(op(a, b)))
    target = x.clone()
    assert _C._arithmetic_runs("add", target, bias, target, 1.0)
    assert torch.equal(bits(target), bits(x + bias))


@pytest.mark.parametrize("shape, gaps", [((70001,), 0), ((2, 33000), 1), ((3, 40000), 0)])
@pytest.mark.parametrize("name", sorted(OPS))
def test_long_runs_are_split_into_chunks(shape, gaps, name):
    """Runs longer than two work items (a dense tensor is one run) are cut into chunks the threads
    share, the last one shorter: every element ATen's, with a number operand and in place too."""
    gen = torch.Generator().manual_seed(len(shape))
    order = list(range(len(shape)))
    x, y = strided(list(shape), order, gen, gaps=gaps), strided(list(shape), order, gen)
    out = torch.empty(shape)
    assert _C._arithmetic_runs(name, x, y, out)
    assert torch.equal(bits(out), bits(OPS[name](x, y)))
    number = torch.tensor(0.3535533905932738, dtype=torch.float64)
    assert _C._arithmetic_runs(name, x, number, out)
    assert torch.equal(bits(out), bits(OPS[name](x, 0.3535533905932738)))
    target, expected = x.clone(), OPS[name](x, y)
    assert _C._arithmetic_runs(name, target, y, target)
    assert torch.equal(bits(target), bits(expected))


@pytest.mark.parametrize("runs, run, gap", [(64, 4096, 4096), (33, 2048, 1), (5, 8192, 8)])
@pytest.mark.parametrize("name", sorted(OPS))
def test_one_loop_of_runs_is_split_over_the_threads(runs, run, gap, name):
    """One loop of runs left after merging (part of a Spyre buffer along its rows: a run a stick):
    its runs are cut into work items the threads share (they were one item), every element
    ATen's, with a number operand and in place too."""
    gen = torch.Generator().manual_seed(runs)
    x = torch.randn(runs * (run + gap), generator=gen).as_strided((runs, run), (run + gap, 1))
    y = torch.randn(runs, run, generator=gen)
    out = torch.empty(runs * (run + gap)).as_strided((runs, run), (run + gap, 1))
    assert _C._arithmetic_runs(name, x, y, out)
    assert torch.equal(bits(out), bits(OPS[name](x, y)))
    assert _C._arithmetic_runs(name, x, torch.tensor(0.375, dtype=torch.float64), out)
    assert torch.equal(bits(out), bits(OPS[name](x, 0.375)))
    target, expected = x.clone(), OPS[name](x, y)
    assert _C._arithmetic_runs(name, target, y, target)
    assert torch.equal(bits(target), bits(expected))


def _declined(x, y, out, name="add", alpha=None):
    before = out.clone()
    assert not _C._arithmetic_runs(name, x, y, out, alpha)
    assert torch.equal(bits(out), bits(before))


# id, how (x, y, out) are made from a (64, 32) float32 tensor a and a (32,) one b, the alpha.
DECLINES = [
    ("float64", lambda a, b: (a.double(), b.double().expand(64, 32), torch.empty(64, 32, dtype=torch.float64)), None),
    ("float16-out", lambda a, b: (a, b.expand(64, 32), torch.empty(64, 32, dtype=torch.float16)), None),
    ("shapes-differ", lambda a, b: (a, b, torch.empty(64, 32)), None),
    ("short-runs", lambda a, b: (a[:, :5], b[:5].expand(64, 5), torch.empty(64, 5)), None),
    ("out-strided-along-the-run", lambda a, b: (a, b.expand(64, 32), torch.empty(64, 64)[:, ::2]), None),
    ("other-strided-along-the-run", lambda a, b: (a, torch.empty(64, 64)[:, ::2], torch.empty(64, 32)), None),
    ("both-broadcast-along-the-run", lambda a, b: (a[:, :1].expand(64, 32), b[:1].expand(64, 32),
                                                   torch.empty(64, 32)), None),
    ("out-is-other", lambda a, b: (a, b.expand(64, 32), b.expand(64, 32)), None),
    ("out-overlaps-self-shifted", lambda a, b: (a[:63], b.expand(63, 32), a[1:]), None),
    ("out-writes-twice", lambda a, b: (a[:1].expand(64, 32), b.expand(64, 32), torch.empty(32).expand(64, 32)),
     None),
    ("empty", lambda a, b: (a[:0], b.expand(0, 32), torch.empty(0, 32)), None),
]


@pytest.mark.parametrize("_, make, alpha", DECLINES, ids=[c[0] for c in DECLINES])
def test_views_it_declines_are_left_untouched(_, make, alpha):
    gen = torch.Generator().manual_seed(1)
    a, b = values(64 * 32, gen).view(64, 32), values(32, gen)
    _declined(*make(a, b), alpha=alpha)


ALPHAS = [2.0, 0.5, -0.1, 1e-9, -3, 7, 1, 3.4e38, -1e-40, math.inf, math.nan, 0.0, -0.0]
FUSED = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")  # ATen's a + alpha * b in one rounding


@pytest.mark.parametrize("isa", ISA_SETS)
@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=4), st.sampled_from(["add", "sub"]),
       st.sampled_from(ALPHAS) | st.floats(-1e3, 1e3) | st.integers(-5, 5), st.data())
def test_add_and_sub_with_alpha_give_atens_bits(isa, shape, name, alpha, data):
    """self + alpha * other (sub: alpha negated), other a view or a number, in place or not: where
    ATen's kernels fuse the product into the sum (its AVX2 and AVX-512 ones, both operands varying
    along the run), ATen's bits in each instruction set's kernels this CPU runs; otherwise (alpha
    other than 1) it declines, writing nothing: a broadcast or number operand, whose elements ATen
    rounds apart in part, a NaN alpha, or ATen's DEFAULT kernels
    (test_replayed_scaled_adds_round_as_atens_kernels)."""
    with kernels_in(_C._set_isa_tables, isa):
        shape[-1] = data.draw(st.sampled_from([8, 16, 37, 64]))
        gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
        order = list(data.draw(st.permutations(range(len(shape)))))
        order.remove(len(shape) - 1)
        order.append(len(shape) - 1)
        x = strided(shape, order, gen, frozenset(), data.draw(st.integers(0, 15)))
        if data.draw(st.booleans()):
            y = torch.tensor(data.draw(st.sampled_from(SPECIAL) | st.floats(-1e6, 1e6, width=32)))
        else:
            y = strided(shape, list(data.draw(st.permutations(range(len(shape))))), gen,
                        frozenset(data.draw(st.sets(st.integers(0, len(shape) - 1)))), data.draw(st.integers(0, 15)))
        in_place = data.draw(st.booleans())
        out = x if in_place else strided(shape, order, gen, frozenset(), data.draw(st.integers(0, 15)))
        before = out.clone()
        expected = OPS[name](x, y, alpha=alpha)
        took = _C._arithmetic_runs(name, x, y, out, alpha)
        varies = y.dim() > 0 and y.stride(-1) == 1  # ATen fuses where both operands vary along the run
        takes = y.dim() == 0 or y.stride(-1) in (0, 1)
        assert took == (takes and (float(alpha) == 1.0 or (FUSED and varies and not math.isnan(alpha))))
        assert torch.equal(bits(out), bits(expected if took else before))


SCALED_SCRIPT = """
import torch, torch_layouts
from torch_layouts import SpyreTensorLayout
gen = torch.Generator().manual_seed(0)
for shape, order in [((5, 70), [0, 1]), ((33,), [0]), ((64, 96), [1, 0]), ((3, 7, 40), [2, 0, 1])]:
    for alpha in (-0.1, 3, 1e-7):
        x, y = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen) * 1e3
        layout = SpyreTensorLayout(shape, torch.float32, order)
        dx, dy = x.to("spyre", device_layout=layout), y.to("spyre", device_layout=layout)
        for call in range(3):  # the first call plans (ATen's op on the views), the others replay
            for got, want in ((dx.add(dy, alpha=alpha), x.add(y, alpha=alpha)),
                              (dx.sub(dy, alpha=alpha), x.sub(y, alpha=alpha)),
                              (dx.clone().add_(dy, alpha=alpha), x.clone().add_(y, alpha=alpha))):
                assert torch.equal(got.cpu().view(torch.int32), want.view(torch.int32)), (shape, order, alpha, call)
print("ok", torch.backends.cpu.get_cpu_capability())
"""


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_replayed_scaled_adds_round_as_atens_kernels(capability):
    """Under each of ATen's CPU capabilities (one this CPU lacks falls back to a lower one), device
    add, sub and add_ with alpha in Spyre's dim orders give the CPU op's bits: fused where ATen's
    kernels fuse, ATen's own op under its DEFAULT kernels."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    proc = subprocess.run([sys.executable, "-c", SCALED_SCRIPT], cwd=Path(__file__).resolve().parents[1], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["mul", "div"])
def test_mul_and_div_decline_an_alpha(name):
    """ATen's mul and div take no alpha: the kernel declines one other than 1, writing nothing."""
    gen = torch.Generator().manual_seed(2)
    a, b = values(64 * 32, gen).view(64, 32), values(32, gen)
    _declined(a, b.expand(64, 32), torch.empty(64, 32), name, 2.0)


def test_an_unknown_op_is_a_value_error():
    with pytest.raises(ValueError, match="op='pow'"):
        _C._arithmetic_runs("pow", torch.ones(8), torch.ones(8), torch.empty(8))
