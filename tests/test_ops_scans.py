"""``cumsum`` on the device: along rows of the buffer the row kernel (``_C._rows_cumsum``) gives
ATen's bits (float32 summed in double, float16/bfloat16 in float32, each sum rounded), later
calls replayed by the runtime's front; elsewhere the CPU kernel on the views. Every call: the
CPU's result bit for bit, the padding the pad value, no CPU fallback."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import padding_holds_pad_value, raises_like_the_cpu
from torch_layouts import SpyreTensorLayout
from torch_layouts.ops import scans

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
SPECIAL = torch.tensor([math.inf, -math.inf, math.nan, 3.0e38, -3.0e38, 1e-30])

# id, shape, dtype, dim order of the input's layout (None: default), dim. The row kernel's
# Python runs on the first call only: the front replays the others.
CASES = [
    ("along-the-sticks", (64, 256), F32, None, -1),
    ("padded-stick", (40, 150), F32, None, 1),
    ("3d-half", (8, 16, 128), F16, None, 2),
    ("bfloat16", (32, 128), BF16, None, -1),
    ("rows-across-sticks", (96, 64), F32, [1, 0], 0),
    ("down-the-columns", (64, 256), F32, None, 0),  # rows of one element per stick, gathered
    ("one-dim", (300,), F32, None, 0),
    ("3d-padded", (4, 6, 70), F32, None, -1),
    ("first-dim-half", (16, 128), F16, None, 0),
]


def values(shape: tuple[int, ...], seed: int, dtype: torch.dtype) -> torch.Tensor:
    """Normal values with a few infinities, NaNs and huge ones (overflow in the running sums)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * 100
    special = SPECIAL[torch.randint(0, len(SPECIAL), shape, generator=gen)]
    return torch.where(torch.rand(shape, generator=gen) < 0.01, special, x).to(dtype)


@pytest.mark.parametrize("_, shape, dtype, order, dim", CASES, ids=[c[0] for c in CASES])
def test_cumsum_gives_the_cpus_bits_on_every_call(_, shape, dtype, order, dim, monkeypatch):
    entered = []
    original = scans._C._rows_cumsum
    monkeypatch.setattr(scans._C, "_rows_cumsum", lambda *a: entered.append(1) or original(*a))
    layout = None if order is None else SpyreTensorLayout(shape, dtype, order)
    torch_layouts.reset_stats()
    calls = []
    for seed in range(3):
        x = values(shape, seed, dtype)
        before = len(entered)
        out = torch.cumsum(x.to("spyre", device_layout=layout), dim)
        calls.append(len(entered) - before)
        assert out.dtype == dtype and padding_holds_pad_value(out)
        assert torch.equal(out.cpu().view(torch.int16 if dtype != F32 else torch.int32),
                           torch.cumsum(x, dim).view(torch.int16 if dtype != F32 else torch.int32))
    assert calls == [1, 0, 0], calls
    assert torch_layouts.stats()["fallbacks"] == {}


@pytest.mark.parametrize("form", ["in-place", "out=", "dtype=", "int32"])
def test_other_forms_give_the_cpus_result(form):
    x = values((24, 128), 5, F32)
    if form == "int32":
        x = (x.nan_to_num(0, 0, 0) % 1000).to(torch.int32)

    def run(device: str) -> torch.Tensor:
        t = x.to(device)
        if form == "in-place":
            return t.cumsum_(1)
        if form == "out=":
            return torch.cumsum(t, 1, out=torch.empty_like(t))
        return torch.cumsum(t, 1, dtype=F16) if form == "dtype=" else torch.cumsum(t, 1)

    got, want = run("spyre"), run("cpu")
    assert got.dtype == want.dtype and torch.equal(got.cpu().nan_to_num(), want.nan_to_num())


def test_a_bad_dim_raises_the_cpus_error():
    raises_like_the_cpu(lambda d: torch.cumsum(torch.ones(4, 64).to(d), 2))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.data())
def test_cumsum_of_any_layout_gives_the_cpus_bits(shape, data):
    order = list(data.draw(st.permutations(range(len(shape)))))
    dtype = data.draw(st.sampled_from([F32, F16]))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = values(tuple(shape), 7, dtype)
    out = torch.cumsum(x.to("spyre", device_layout=SpyreTensorLayout(tuple(shape), dtype, order)), dim)
    bits = torch.int32 if dtype == F32 else torch.int16
    assert torch.equal(out.cpu().view(bits), torch.cumsum(x, dim).view(bits)) and padding_holds_pad_value(out)
