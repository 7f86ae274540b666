"""The C++ row kernels (``_C._rows_*``) on strided views of device-like buffers, against float64 references.

Every view of a call has the shape ``(outer dims..., row dims...)``; the last ``width`` dims make
a row, laid out in whatever strides the buffer gives them: a stick layout (each tile holds its rows'
sticks one after another), permuted and padded buffers, transposed rows, plain rows. Each property
draws such geometries (a layout per operand), runs the kernel under each instruction set of the row
math, and checks it against the same math in float64 on the rows reshaped to ``(rows, length)``;
input buffers are filled with NaN around the views (a read outside a view poisons the result) and
output buffers with a sentinel that must survive outside the view; inputs must come back unchanged.
A case may give a row's real length (``tail``: a padded stick's row ends within its last run): the
rest of every row is then NaN in the inputs and must keep the sentinel in the outputs.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from dataclasses import dataclass, replace

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from ops_support import kernels_in
from torch_layouts import _C

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
BITS = {2: torch.int16, 4: torch.int32}
SENTINEL = -96.0  # exact in every dtype; no kernel output here comes near it
INF = math.inf
SETS = _C._rows_math_sets()  # the instruction sets this CPU runs the row math in, best first
MODES = pytest.mark.parametrize("instructions", SETS)

ROW_SIZES = [1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 24, 31, 33, 64, 65]
OUTER_SIZES = [0, 1, 1, 2, 3, 4, 5, 7, 9]


def row_math(instructions: str):
    """Runs the kernels in one instruction set of ``SETS``; restores the old one."""
    return kernels_in(_C._rows_set_math, instructions)


# ---- where views lie ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """A view of some shape in a 1-D buffer of ``storage`` elements."""

    strides: tuple[int, ...]
    offset: int
    storage: int


def placed(shape: tuple[int, ...], order: list[int], gaps: list[int] | None = None,
           steps: list[int] | None = None, offset: int = 0) -> Placement:
    """Dims laid out in memory in ``order`` (outermost first): each one's elements ``steps[d]`` inner
    blocks apart, ``gaps[d]`` elements of padding after its extent."""
    gaps = gaps or [0] * len(shape)
    steps = steps or [1] * len(shape)
    strides, running = [0] * len(shape), 1
    for d in reversed(order):
        strides[d] = running * steps[d]
        running = strides[d] * shape[d] + gaps[d]
    return Placement(tuple(strides), offset, max(offset + running, offset + 1))


def permuted_base(base: tuple[int, ...], perm: tuple[int, ...]) -> tuple[tuple[int, ...], Placement]:
    """``torch.empty(base).permute(perm)``: its shape and placement."""
    strides = [math.prod(base[d + 1:]) for d in range(len(base))]
    return tuple(base[p] for p in perm), Placement(tuple(strides[p] for p in perm), 0, max(1, math.prod(base)))


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(BITS[t.element_size()])


def covered(shape: tuple[int, ...], where: Placement) -> torch.Tensor:
    mask = torch.zeros(where.storage, dtype=torch.bool)
    mask.as_strided(shape, where.strides, where.offset).fill_(True)
    return mask


def make_input(shape: tuple[int, ...], where: Placement, dtype: torch.dtype, values: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """A buffer of NaN holding ``values`` (rounded to ``dtype``) at the view; the buffer and the view."""
    buf = torch.full((where.storage,), math.nan, dtype=dtype)
    view = buf.as_strided(shape, where.strides, where.offset)
    view.copy_(values)
    return buf, view


def make_output(shape: tuple[int, ...], where: Placement, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    buf = torch.full((where.storage,), SENTINEL, dtype=dtype)
    return buf, buf.as_strided(shape, where.strides, where.offset)


def assert_untouched(buf: torch.Tensor, shape: tuple[int, ...], where: Placement) -> None:
    """Every element of the output's buffer outside the view still holds the sentinel."""
    outside = bits(buf)[~covered(shape, where)]
    expected = bits(torch.tensor([SENTINEL], dtype=buf.dtype))
    bad = (outside != expected).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} elements written outside the view (first at {bad[:5].tolist()})"


def as_rows(t: torch.Tensor, case: "Case") -> torch.Tensor:
    """The view's rows' real elements as float64 (rows, length)."""
    return t.double().reshape(-1, case.full)[:, :case.length]


def assert_close(got: torch.Tensor, ref: torch.Tensor, tol: float, atol: float | None = None) -> None:
    torch.testing.assert_close(got.double(), ref.double(), rtol=tol, atol=tol if atol is None else atol,
                               equal_nan=True)


def random_values(shape: tuple[int, ...], seed: int, scale: float = 1.0, shift: float = 0.0,
                  masked: float = 0.0) -> torch.Tensor:
    """randn * scale + shift in float64; a ``masked`` fraction of the entries -inf."""
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(shape, generator=gen, dtype=torch.float64) * scale + shift
    if masked:
        v[torch.rand(shape, generator=gen, dtype=torch.float64) < masked] = -INF
    return v


# ---- cases: a shape, a width, a dtype and a placement per view operand ----------------------------


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    width: int
    dtype: torch.dtype
    places: tuple[Placement, ...]  # one per view operand (inputs, then outputs)
    seed: int
    tail: int = -1  # a row's real elements, its first ones (-1: the whole row)

    @property
    def rows(self) -> int:
        return math.prod(self.shape[:len(self.shape) - self.width])

    @property
    def full(self) -> int:
        return math.prod(self.shape[len(self.shape) - self.width:])

    @property
    def length(self) -> int:
        """A row's real elements."""
        return self.full if self.tail == -1 else self.tail


@st.composite
def geometries(draw: st.DrawFn, max_numel: int = 3000) -> tuple[tuple[int, ...], int]:
    """Outer dims (size 0 included) and 1-3 row dims of sizes around multiples of 8."""
    width = draw(st.integers(1, 3))
    outer = draw(st.lists(st.sampled_from(OUTER_SIZES), max_size=3))
    shape = outer + draw(st.lists(st.sampled_from(ROW_SIZES), min_size=width, max_size=width))
    while math.prod(shape) > max_numel:
        d = max(range(len(shape)), key=shape.__getitem__)
        shape[d] //= 2
    return tuple(shape), width


@st.composite
def placements(draw: st.DrawFn, shape: tuple[int, ...], width: int) -> Placement:
    """Dense rows, a stick layout (the rows of a tile one after another: the last outer dim inside
    the row's outer dims) or any permutation with element steps; padding and offsets but for dense."""
    rank = len(shape)
    outer, row = list(range(rank - width)), list(range(rank - width, rank))
    kind = draw(st.sampled_from(["dense", "stick", "permuted"]))
    if kind == "dense":
        return placed(shape, list(range(rank)))
    order = outer[:-1] + row[:-1] + outer[-1:] + row[-1:] if kind == "stick" else list(draw(st.permutations(range(rank))))
    gaps = [draw(st.sampled_from([0, 0, 1, 3])) for _ in shape]
    steps = [draw(st.sampled_from([1, 1, 1, 2])) if kind == "permuted" else 1 for _ in shape]
    return placed(shape, order, gaps, steps, draw(st.integers(0, 3)))


@st.composite
def cases(draw: st.DrawFn, operands: int, dtypes: tuple[torch.dtype, ...] = DTYPES, tails: bool = True) -> Case:
    """A geometry, a placement per operand, a dtype, a seed and (``tails``) maybe a row's real length."""
    shape, width = draw(geometries())
    places = tuple(draw(placements(shape, width)) for _ in range(operands))
    full = math.prod(shape[len(shape) - width:])
    tail = draw(st.one_of(st.just(-1), st.integers(1, full))) if tails else -1
    return Case(shape, width, draw(st.sampled_from(dtypes)), places, draw(st.integers(0, 2**32 - 1)), tail)


# Hand-built geometries, each as a base tensor and the permutation whose view is the rows operand.
TABLE = {
    "stick tiles (tiles, rows, stick) as rows (tiles*stick)": ((3, 5, 64), (1, 0, 2), 2),
    "stick tiles with a batch dim": ((2, 2, 4, 8), (0, 2, 1, 3), 2),
    "float32 sticks (runs of 32, compiled with a fixed run)": ((4, 6, 32), (1, 0, 2), 2),
    "float32 sticks, one per row": ((1, 9, 32), (1, 0, 2), 2),
    "runs of 64 over two threads' chunks": ((3, 300, 64), (1, 0, 2), 2),
    "stick of 8 with a ragged tile count": ((5, 3, 8), (1, 0, 2), 2),
    "contiguous rows": ((7, 37), (0, 1), 1),
    "rows over two dims": ((3, 4, 5, 6), (0, 1, 2, 3), 2),
    "transposed rows (row dim of stride 6)": ((19, 6), (1, 0), 1),
    "row dims transposed against each other": ((3, 9, 5), (0, 2, 1), 2),
    "several outer dims": ((2, 3, 5, 9), (0, 1, 2, 3), 1),
    "tail of 8k+1": ((4, 33), (0, 1), 1),
    "row of length 1": ((9, 1), (0, 1), 1),
    "single row, whole tensor": ((4, 3, 7), (0, 1, 2), 3),
    "zero rows": ((0, 16), (0, 1), 1),
    "zero rows among outer dims": ((3, 0, 8), (0, 1, 2), 1),
    "two threads' chunks": ((256, 520), (0, 1), 1),
    "two threads' chunks over stick tiles": ((8, 160, 64), (1, 0, 2), 2),
    # Spyre's 3-D/4-D layouts: a batch dim's rows continue each other's sticks (the kernels visit
    # rows in that order; per-row results still land at their host rows)
    "batch rows adjacent ([rows][tiles][batch][stick])": ((5, 3, 4, 8), (2, 0, 1, 3), 2),
    "batch rows adjacent under two outer dims": ((3, 5, 2, 4, 8), (3, 0, 1, 2, 4), 2),
    "batch rows adjacent over two threads' chunks": ((160, 4, 8, 64), (2, 0, 1, 3), 2),
}


def table_case(name: str, dtype: torch.dtype, operands: int, seed: int = 0) -> Case:
    base, perm, width = TABLE[name]
    shape, where = permuted_base(base, perm)
    return Case(shape, width, dtype, (where,) * operands, seed)


# ---- runners: call a kernel on fresh buffers, check the buffers, return the results --------------


def run_views(case: Case, inputs: list[torch.Tensor], outputs: int, call) -> list[torch.Tensor]:
    """Places ``inputs`` (float64 values; NaN past a row's real length) and ``outputs``
    sentinel-filled views, calls ``call(*views)``, checks that inputs are unchanged and nothing
    outside the outputs' real elements was written; the views."""
    places = case.places
    if case.tail != -1:
        inputs = [v.clone() for v in inputs]
        for v in inputs:
            v.reshape(-1, case.full)[:, case.tail:] = math.nan
    ins = [make_input(case.shape, where, case.dtype, v) for where, v in zip(places, inputs)]
    outs = [make_output(case.shape, where, case.dtype) for where in places[len(inputs):len(inputs) + outputs]]
    before = [bits(buf).clone() for buf, _ in ins]
    call(*[v for _, v in ins], *[v for _, v in outs])
    for (buf, _), old in zip(ins, before):
        assert torch.equal(bits(buf), old), "an input buffer was modified"
    for (buf, view), where in zip(outs, places[len(inputs):]):
        assert_untouched(buf, case.shape, where)
        past = bits(view.reshape(-1, case.full)[:, case.length:].contiguous())
        assert (past == bits(torch.tensor([SENTINEL], dtype=buf.dtype))).all(), "written past a row's real length"
    return [v for _, v in ins] + [v for _, v in outs]


def run_softmax(case: Case, x_values: torch.Tensor, log: bool, safe: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """x and out as float64 rows."""
    x, out = run_views(case, [x_values], 1,
                       lambda x, out: _C._rows_softmax(x, out, case.width, log, safe, length=case.tail))
    return as_rows(x, case), as_rows(out, case)


def run_softmax_backward(case: Case, g_values: torch.Tensor, y_values: torch.Tensor, log: bool
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g, y, out = run_views(case, [g_values, y_values], 1,
                          lambda g, y, out: _C._rows_softmax_backward(g, y, out, case.width, log, length=case.tail))
    return as_rows(g, case), as_rows(y, case), as_rows(out, case)


def run_layer_norm(case: Case, x_values: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   eps: float, rms: bool = False) -> tuple[torch.Tensor, ...]:
    """x and out as float64 rows, mean and rstd (float32, filled over a sentinel); ``rms``: RMS norm."""
    mean, rstd = torch.full((case.rows,), SENTINEL), torch.full((case.rows,), SENTINEL)
    w_before = None if weight is None else weight.clone()
    b_before = None if bias is None else bias.clone()
    x, out = run_views(case, [x_values], 1,
                       lambda x, out: _C._rows_layer_norm(x, out, weight, bias, eps, mean, rstd, case.width,
                                                          length=case.tail, rms=rms))
    assert weight is None or torch.equal(weight, w_before)
    assert bias is None or torch.equal(bias, b_before)
    return as_rows(x, case), as_rows(out, case), mean, rstd


def run_layer_norm_backward(case: Case, g_values: torch.Tensor, x_values: torch.Tensor, mean: torch.Tensor,
                            rstd: torch.Tensor, weight: torch.Tensor | None, want: tuple[bool, bool, bool],
                            rms: bool = False) -> tuple[torch.Tensor | None, ...]:
    """g and x as float64 rows, then grad_input rows, grad_weight, grad_bias (None where not wanted)."""
    gw = torch.full((case.length,), SENTINEL) if want[1] else None
    gb = torch.full((case.length,), SENTINEL) if want[2] else None
    stats = (mean.clone(), rstd.clone(), None if weight is None else weight.clone())

    def call(g, x, gi=None):
        _C._rows_layer_norm_backward(g, x, mean, rstd, weight, gi, gw, gb, case.width, length=case.tail, rms=rms)

    views = run_views(case, [g_values, x_values], int(want[0]), call)
    assert torch.equal(mean, stats[0]) and torch.equal(rstd, stats[1])
    assert weight is None or torch.equal(weight, stats[2])
    gi = as_rows(views[2], case) if want[0] else None
    return as_rows(views[0], case), as_rows(views[1], case), gi, gw, gb


def run_sum(case: Case, x_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's sum of its real elements (NaN past them), float32."""
    sums = torch.full((case.rows,), SENTINEL)
    (x,) = run_views(case, [x_values], 0, lambda x: _C._rows_sum(x, sums, case.width, length=case.tail))
    return as_rows(x, case), sums


def run_extreme(case: Case, x_values: torch.Tensor, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's maximum (largest) or minimum of its real elements (NaN past them), float32."""
    out = torch.full((case.rows,), SENTINEL)
    (x,) = run_views(case, [x_values], 0, lambda x: _C._rows_extreme(x, out, case.width, largest, length=case.tail))
    return as_rows(x, case), out


# ---- references (float64 on the rows) -------------------------------------------------------------


def softmax_ref(x: torch.Tensor, log: bool, safe: bool) -> torch.Tensor:
    ref = torch.log_softmax(x, -1) if log else torch.softmax(x, -1)
    if safe:
        ref = ref.masked_fill((x == -INF).all(-1, keepdim=True), 0.0)
    return ref


def softmax_backward_ref(g: torch.Tensor, y: torch.Tensor, log: bool) -> torch.Tensor:
    op = torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data
    return op(g, y, 1, torch.float64)


def layer_norm_stats(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (rows,) mean and rstd of float64 rows, as the backward kernel takes them."""
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[1]], None, None, eps)
    return mean.flatten().float(), rstd.flatten().float()


def layer_norm_backward_ref(g: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                            weight: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    n = x.shape[1]
    w = torch.ones(n, dtype=torch.float64) if weight is None else weight.double()
    return torch.ops.aten.native_layer_norm_backward(g, x, [n], mean.double()[:, None], rstd.double()[:, None], w,
                                                     torch.zeros(n, dtype=torch.float64), [True, True, True])


def assert_close_in_rows(got: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    """assert_close(got, ref, tol) with the absolute tolerance scaled by each row's largest
    element where that exceeds 1: a row's elements come from terms of that size which cancel (a
    layer norm input gradient of a 3-element row: 16.417 and -16.199 beside -0.21703, off by 1.3e-5
    in float32), and float32 loses tol relative to them, not to the small result."""
    scale = ref.double().abs().amax(-1, keepdim=True).clamp(min=1.0)
    diff = (got.double() - ref.double()).abs()
    ok = (diff <= tol * ref.double().abs() + tol * scale) | (got.isnan() & ref.isnan())
    bad = (~ok).nonzero()
    assert bad.numel() == 0, f"{bad.shape[0]} elements differ, first at {bad[:3].tolist()}: " \
        f"{got[tuple(bad[0])].item()} against {ref[tuple(bad[0])].item()}"


def sum_bound(x: torch.Tensor) -> torch.Tensor:
    """What float32 accumulation may lose: relative to the sum of magnitudes."""
    return 1e-5 * x.abs().sum(-1) + 1e-6


# ---- checks shared by the properties and the tables ----------------------------------------------


def check_softmax(case: Case, log: bool, safe: bool, masked: float = 0.0, scale: float = 1.0) -> None:
    x, out = run_softmax(case, random_values(case.shape, case.seed, scale, masked=masked), log, safe)
    assert_close(out, softmax_ref(x, log, safe), TOL[case.dtype])
    finite_rows = (x > -INF).any(-1, keepdim=True).expand_as(x)
    hidden = (x == -INF) & finite_rows
    assert torch.all(out[hidden] == (-INF if log else 0.0)), "a -inf entry of a row with finite ones"


def check_softmax_backward(case: Case, log: bool) -> None:
    logits = random_values(case.shape, case.seed + 1, 2.0).reshape(-1, case.full)[:, :case.length]
    y_values = torch.zeros(case.rows, case.full, dtype=torch.float64)
    y_values[:, :case.length] = (torch.log_softmax if log else torch.softmax)(logits, -1)
    y_values = y_values.reshape(case.shape)
    g, y, out = run_softmax_backward(case, random_values(case.shape, case.seed), y_values, log)
    assert_close(out, softmax_backward_ref(g, y, log), TOL[case.dtype])


def affine_params(case: Case, weight: bool, bias: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    gen = torch.Generator().manual_seed(case.seed + 2)
    w = torch.randn(case.length, generator=gen) if weight else None
    b = torch.randn(case.length, generator=gen) if bias else None
    return w, b


def check_layer_norm(case: Case, weight: bool, bias: bool, eps: float, scale: float = 1.0, shift: float = 0.0
                     ) -> None:
    w, b = affine_params(case, weight, bias)
    x, out, mean, rstd = run_layer_norm(case, random_values(case.shape, case.seed, scale, shift), w, b, eps)
    ref, ref_mean, ref_rstd = torch.ops.aten.native_layer_norm(
        x, [case.length], None if w is None else w.double(), None if b is None else b.double(), eps)
    assert_close(out, ref, TOL[case.dtype])
    # mean and rstd are float32 results of float32 math on exact inputs, whatever the dtype
    assert_close(mean, ref_mean.flatten(), 1e-5)
    assert_close(rstd, ref_rstd.flatten(), 1e-5)


def check_layer_norm_backward(case: Case, weight: bool, want: tuple[bool, bool, bool], eps: float = 1e-5,
                              scale: float = 1.0) -> None:
    x_values = random_values(case.shape, case.seed, scale, 0.5)
    rows_in_dtype = x_values.to(case.dtype).double().reshape(-1, case.full)[:, :case.length]
    mean, rstd = layer_norm_stats(rows_in_dtype, eps)
    w, _ = affine_params(case, weight, False)
    g, x, gi, gw, gb = run_layer_norm_backward(case, random_values(case.shape, case.seed + 3), x_values, mean, rstd,
                                               w, want)
    ref_gi, ref_gw, ref_gb = layer_norm_backward_ref(g, x, mean, rstd, w)
    if want[0]:
        assert_close_in_rows(gi, ref_gi, TOL[case.dtype])
    column_tol = 1e-5 * max(1.0, math.sqrt(case.rows))  # float32 sums over the rows
    if want[1]:
        assert_close(gw, ref_gw, 1e-5, column_tol)
    if want[2]:
        assert_close(gb, ref_gb, 1e-5, column_tol)


def check_rms_norm(case: Case, weight: bool, eps: float, scale: float = 1.0, shift: float = 0.0) -> None:
    """RMS norm (layer norm's kernels with no mean) against float64: out = x * rstd * w with
    rstd = 1 / sqrt(mean(x ** 2) + eps); the mean comes back 0."""
    w, _ = affine_params(case, weight, False)
    x, out, mean, rstd = run_layer_norm(case, random_values(case.shape, case.seed, scale, shift), w, None, eps,
                                        rms=True)
    ref_rstd = ((x * x).mean(-1) + eps).rsqrt()
    ref = x * ref_rstd[:, None] * (1.0 if w is None else w.double())
    assert_close(out, ref, TOL[case.dtype])
    assert torch.all(mean == 0)
    assert_close(rstd, ref_rstd, 1e-5)


def check_rms_norm_backward(case: Case, weight: bool, want: tuple[bool, bool], eps: float = 1e-5,
                            scale: float = 1.0) -> None:
    """RMS norm's backward against float64: with xhat = x * rstd and gw = g * w, grad_input =
    rstd * (gw - xhat * mean(gw * xhat)) and grad_weight = the column sums of g * xhat."""
    x_values = random_values(case.shape, case.seed, scale, 0.5)
    rows_in_dtype = x_values.to(case.dtype).double().reshape(-1, case.full)[:, :case.length]
    rstd = ((rows_in_dtype * rows_in_dtype).mean(-1) + eps).rsqrt().float()
    w, _ = affine_params(case, weight, False)
    g, x, gi, gw, gb = run_layer_norm_backward(case, random_values(case.shape, case.seed + 3), x_values,
                                               torch.zeros_like(rstd), rstd, w, (*want, False), rms=True)
    r = rstd.double()[:, None]
    xhat, gwt = x * r, g * (1.0 if w is None else w.double())
    if want[0]:
        assert_close_in_rows(gi, r * (gwt - xhat * (gwt * xhat).mean(-1, keepdim=True)), TOL[case.dtype])
    if want[1]:
        assert_close(gw, (g * xhat).sum(0), 1e-5, 1e-5 * max(1.0, math.sqrt(case.rows)))


def check_sum(case: Case, scale: float = 1.0) -> None:
    x, sums = run_sum(case, random_values(case.shape, case.seed, scale))
    err = (sums.double() - x.sum(-1)).abs()
    assert torch.all(err <= sum_bound(x)), f"row sums off by up to {err.max() if err.numel() else 0}"


def check_extremes(case: Case, nan: float = 0.0) -> None:
    """Each row's maximum and minimum exactly (the row's values as placed, so float16 and bfloat16
    rounding is the same on both sides), NaN where the row holds one: a ``nan`` fraction of the
    values, and a few infinities."""
    values = random_values(case.shape, case.seed, 100.0, masked=0.05)
    gen = torch.Generator().manual_seed(case.seed + 7)
    values[torch.rand(case.shape, generator=gen, dtype=torch.float64) < 0.05] = INF
    values[torch.rand(case.shape, generator=gen, dtype=torch.float64) < nan] = math.nan
    for largest in (True, False):
        x, got = run_extreme(case, values, largest)
        ref = x.amax(-1) if largest else x.amin(-1)
        torch.testing.assert_close(got.double(), ref, rtol=0, atol=0, equal_nan=True)


# ---- properties over drawn geometries -------------------------------------------------------------


@MODES
@given(case=cases(2), log=st.booleans(), safe=st.booleans(), masked=st.sampled_from([0.0, 0.0, 0.3, 0.9]))
def test_softmax_matches_float64_on_any_geometry(instructions: str, case: Case, log: bool, safe: bool,
                                                 masked: float) -> None:
    with row_math(instructions):
        check_softmax(case, log, safe, masked)


@MODES
@given(case=cases(3), log=st.booleans())
def test_softmax_backward_matches_aten_on_any_geometry(instructions: str, case: Case, log: bool) -> None:
    with row_math(instructions):
        check_softmax_backward(case, log)


@MODES
@given(case=cases(2), weight=st.booleans(), bias=st.booleans(), eps=st.sampled_from([1e-5, 1e-3, 0.1]),
       scale=st.sampled_from([0.5, 1.0, 3.0]), shift=st.sampled_from([0.0, 1.0, -2.0]))
def test_layer_norm_matches_aten_on_any_geometry(instructions: str, case: Case, weight: bool, bias: bool, eps: float,
                                                 scale: float, shift: float) -> None:
    with row_math(instructions):
        check_layer_norm(case, weight, bias, eps, scale, shift)


@MODES
@given(case=cases(3), weight=st.booleans(), want=st.tuples(st.booleans(), st.booleans(), st.booleans()),
       scale=st.sampled_from([0.5, 1.0, 3.0]))
@example(case=Case((4, 4, 4, 8), 1, torch.float32, (Placement((128, 32, 8, 1), 0, 512),) * 3, 187, 3), weight=True,
         want=(True, False, False), scale=1.0)  # 3-element rows whose terms cancel (found by CI)
def test_layer_norm_backward_matches_aten_on_any_geometry(instructions: str, case: Case, weight: bool,
                                                          want: tuple[bool, bool, bool], scale: float) -> None:
    with row_math(instructions):
        check_layer_norm_backward(case, weight, want, scale=scale)


@MODES
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_layer_norm_backward_of_one_element_rows_is_zero(instructions: str, weight: bool, scale: float) -> None:
    """Rows of one element (x - mean = 0, rstd = 1 / sqrt(eps) = 316): a zero input gradient, as
    float64 gives, not the rounding of rstd * g that ATen's A * g + B * x + C form leaves (2e-5)."""
    place = Placement(strides=(3, 1, 1), offset=0, storage=6)
    case = Case(shape=(2, 3, 1), width=1, dtype=torch.float32, places=(place, place, place), seed=0)
    with row_math(instructions):
        check_layer_norm_backward(case, weight, (True, False, False), scale=scale)


@MODES
@given(case=cases(2), weight=st.booleans(), eps=st.sampled_from([1e-6, 1e-3, 0.1]),
       scale=st.sampled_from([0.5, 1.0, 3.0]), shift=st.sampled_from([0.0, 1.0, -2.0]))
def test_rms_norm_matches_float64_on_any_geometry(instructions: str, case: Case, weight: bool, eps: float,
                                                  scale: float, shift: float) -> None:
    with row_math(instructions):
        check_rms_norm(case, weight, eps, scale, shift)


@MODES
@given(case=cases(3), weight=st.booleans(), want=st.tuples(st.booleans(), st.booleans()),
       scale=st.sampled_from([0.5, 1.0, 3.0]))
def test_rms_norm_backward_matches_float64_on_any_geometry(instructions: str, case: Case, weight: bool,
                                                           want: tuple[bool, bool], scale: float) -> None:
    with row_math(instructions):
        check_rms_norm_backward(case, weight, want, scale=scale)


@MODES
@given(case=cases(1), scale=st.sampled_from([1.0, 100.0]))
def test_row_sums_match_float64_on_any_geometry(instructions: str, case: Case, scale: float) -> None:
    with row_math(instructions):
        check_sum(case, scale)


@MODES
@given(case=cases(1), nan=st.sampled_from([0.0, 0.0, 0.01, 0.3]))
def test_row_extremes_are_exact_on_any_geometry(instructions: str, case: Case, nan: float) -> None:
    with row_math(instructions):
        check_extremes(case, nan)


@MODES
@given(case=cases(3, dtypes=(torch.float32,)))
def test_softmax_rows_sum_to_one_and_log_softmax_is_its_log(instructions: str, case: Case) -> None:
    """float32: every softmax row sums to 1 and log_softmax = log(softmax) where softmax is normal."""
    x_values = random_values(case.shape, case.seed, 4.0)
    with row_math(instructions):
        _, soft = run_softmax(case, x_values, log=False, safe=False)
        _, logs = run_softmax(replace(case, places=case.places[1:]), x_values,
                              log=True, safe=False)
    assert_close(soft.sum(-1), torch.ones(case.rows, dtype=torch.float64), 1e-5)
    normal = soft > 1e-30
    assert_close(logs[normal], soft[normal].log(), 1e-5)
    assert torch.all(logs <= 0) and torch.all(soft >= 0)


@given(case=cases(3), log=st.booleans(), weight=st.booleans())
def test_instruction_sets_agree(case: Case, log: bool, weight: bool) -> None:
    """Every kernel gives the same results, within the dtype's rounding, in every instruction set."""
    x_values = random_values(case.shape, case.seed, masked=0.1)
    g_values = random_values(case.shape, case.seed + 1)
    finite_x = random_values(case.shape, case.seed + 2, 2.0)
    w, b = affine_params(case, weight, weight)
    mean, rstd = layer_norm_stats(finite_x.to(case.dtype).double().reshape(-1, case.full)[:, :case.length], 1e-5)
    results = {}
    for instructions in SETS:
        with row_math(instructions):
            soft = run_softmax(case, x_values, log, safe=True)[1]
            y = torch.zeros(case.rows, case.full, dtype=torch.float64)
            y[:, :case.length] = soft
            back = run_softmax_backward(case, g_values, y.reshape(case.shape), log)[2]
            _, norm, norm_mean, norm_rstd = run_layer_norm(case, finite_x, w, b, 1e-5)
            _, _, gi, gw, gb = run_layer_norm_backward(case, g_values, finite_x, mean, rstd, w, (True, True, True))
            sums = run_sum(case, finite_x)[1]
            results[instructions] = [soft, back, norm, norm_mean, norm_rstd, gi, gw, gb, sums]
    tols = [TOL[case.dtype]] * 3 + [1e-5, 1e-5, TOL[case.dtype], 1e-5, 1e-5, 1e-5]
    names = ["softmax", "softmax_backward", "layer_norm", "mean", "rstd", "grad_input", "grad_weight", "grad_bias",
             "sum"]
    column_tol = 1e-5 * max(1.0, math.sqrt(case.rows))
    rows = finite_x.to(case.dtype).double().reshape(-1, case.full)
    sum_tol = 2 * float(sum_bound(rows).max()) if rows.numel() else 0.0  # each within sum_bound of the exact sum
    for instructions in SETS[:-1]:  # each against the portable loops
        for name, tol, simd, plain in zip(names, tols, results[instructions], results["portable"]):
            atol = column_tol if name in ("grad_weight", "grad_bias") else sum_tol if name == "sum" else None
            try:
                assert_close(simd, plain, tol, atol)
            except AssertionError as e:
                raise AssertionError(f"{name}: {instructions} and portable differ\n{e}") from None


# ---- the hand-built geometries, every kernel, every dtype, both paths ----------------------------


@MODES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(TABLE))
def test_every_kernel_on_hand_built_geometries(instructions: str, dtype: torch.dtype, name: str) -> None:
    with row_math(instructions):
        for log in (False, True):
            check_softmax(table_case(name, dtype, 2), log, safe=False, masked=0.2)
            check_softmax_backward(table_case(name, dtype, 3), log)
        check_layer_norm(table_case(name, dtype, 2), True, True, 1e-5)
        check_layer_norm_backward(table_case(name, dtype, 3), True, (True, True, True))
        check_sum(table_case(name, dtype, 1))
        check_extremes(table_case(name, dtype, 1), nan=0.02)


@MODES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_operands_in_different_layouts(instructions: str, dtype: torch.dtype) -> None:
    """The input a stick layout, the output dense rows, the gradient transposed: one call reads each
    in its own strides."""
    shape = (6, 3, 16)
    stick = permuted_base((3, 6, 16), (1, 0, 2))[1]
    dense = placed(shape, [0, 1, 2])
    transposed = placed(shape, [2, 1, 0], gaps=[1, 0, 2], offset=1)
    with row_math(instructions):
        for places in [(stick, dense, transposed), (transposed, stick, dense), (dense, transposed, stick)]:
            case = Case(shape, 2, dtype, places, 7)
            check_softmax(case, log=False, safe=True, masked=0.2)
            check_softmax_backward(case, log=True)
            check_layer_norm(case, True, False, 1e-5)
            check_layer_norm_backward(case, True, (True, True, True))


# ---- special values -------------------------------------------------------------------------------


MASKED_ROWS = {  # rows of length 19 (two vectors and a tail of 3), -inf at these positions
    "first": [0],
    "last (in the tail)": [18],
    "all but one": [k for k in range(19) if k != 9],
    "a whole vector": list(range(8, 16)),
    "every other": list(range(0, 19, 2)),
}


@MODES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("where", list(MASKED_ROWS))
def test_masked_entries_give_exact_zeros(instructions: str, dtype: torch.dtype, log: bool, where: str) -> None:
    """-inf entries (masked attention) give exactly 0 (log: -inf); the others match torch."""
    x = torch.randn(4, 19, generator=torch.Generator().manual_seed(5)).to(dtype)
    x[:, MASKED_ROWS[where]] = -INF
    out = torch.full_like(x, SENTINEL)
    with row_math(instructions):
        _C._rows_softmax(x, out, 1, log, False)
    masked = x == -INF
    assert torch.all(out[masked] == (-INF if log else 0.0))
    ref = (torch.log_softmax if log else torch.softmax)(x.double(), -1)
    assert_close(out[~masked], ref[~masked], TOL[dtype])
    if not log:
        assert_close(out.double().sum(-1), torch.ones(4, dtype=torch.float64), TOL[dtype] * 4)


@MODES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("length", [1, 7, 8, 19])
def test_rows_of_only_minus_inf(instructions: str, dtype: torch.dtype, length: int) -> None:
    """safe=True: zeros (aten._safe_softmax; log too); safe=False: NaN like torch.softmax. The other
    rows are unaffected."""
    x = torch.randn(3, length, generator=torch.Generator().manual_seed(length)).to(dtype)
    x[1] = -INF
    with row_math(instructions):
        for log in (False, True):
            torch_op = torch.log_softmax if log else torch.softmax
            safe_out, plain_out = torch.full_like(x, SENTINEL), torch.full_like(x, SENTINEL)
            _C._rows_softmax(x, safe_out, 1, log, True)
            _C._rows_softmax(x, plain_out, 1, log, False)
            assert torch.equal(safe_out[1], torch.zeros(length, dtype=dtype))
            if not log:
                assert torch.equal(safe_out[1], torch.ops.aten._safe_softmax(x.float(), 1)[1].to(dtype))
            assert torch.isnan(plain_out[1]).all()
            assert torch.isnan(torch_op(x.float(), -1)[1]).all()  # what the NaN row copies
            for out in (safe_out, plain_out):
                assert_close(out[[0, 2]], torch_op(x[[0, 2]].double(), -1), TOL[dtype])


@MODES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("special", [math.nan, INF], ids=["nan", "inf"])
@pytest.mark.parametrize("position", [0, 5, 8, 16])
def test_nan_and_inf_propagate_like_torch(instructions: str, dtype: torch.dtype, log: bool, special: float,
                                          position: int) -> None:
    """A NaN (or +inf) anywhere in a row of 17 makes it what torch.softmax makes it; other rows are fine."""
    x = torch.randn(3, 17, generator=torch.Generator().manual_seed(position)).to(dtype)
    x[1, position] = special
    out = torch.full_like(x, SENTINEL)
    with row_math(instructions):
        _C._rows_softmax(x, out, 1, log, True)
    torch_op = torch.log_softmax if log else torch.softmax
    assert_close(out, torch_op(x.float(), -1), TOL[dtype])
    assert torch.isnan(out[1]).all()
    assert not torch.isnan(out[[0, 2]]).any()


LARGE_ROWS = {
    "1e4 and -1e4": [1e4, -1e4, 0.0, 1e4 - 1.0, 5.0, -1e4, 1e4 - 2.0, 3.0, 1e4, 2.0],
    "all near 1e4": [1e4 + k for k in range(10)],
    "all near -1e4": [-1e4 - k for k in range(10)],
    "spread 30 apart": [30.0 * k for k in range(10)],
}


@MODES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("row", list(LARGE_ROWS))
def test_large_inputs_stay_finite_and_correct(instructions: str, dtype: torch.dtype, log: bool, row: str) -> None:
    """The max is subtracted first: exp never overflows and the results match float64."""
    x = torch.tensor([LARGE_ROWS[row]] * 2, dtype=dtype)
    out = torch.full_like(x, SENTINEL)
    with row_math(instructions):
        _C._rows_softmax(x, out, 1, log, False)
    assert torch.isfinite(out).all()
    ref = (torch.log_softmax if log else torch.softmax)(x.double(), -1)
    assert_close(out, ref, TOL[dtype], TOL[dtype] * (1e-2 if not log else 1.0))


# ---- layer norm: parameters and gradients ---------------------------------------------------------


@MODES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("weight,bias", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["plain", "weight", "bias", "affine"])
def test_layer_norm_with_and_without_parameters(instructions: str, dtype: torch.dtype, weight: bool, bias: bool) -> None:
    case = table_case("stick tiles (tiles, rows, stick) as rows (tiles*stick)", dtype, 2, seed=11)
    with row_math(instructions):
        check_layer_norm(case, weight, bias, 1e-5, scale=2.0, shift=1.0)


@MODES
@pytest.mark.parametrize("weight", [False, True], ids=["no_weight", "weight"])
@pytest.mark.parametrize("want", [(False, True, True), (False, True, False), (False, False, True),
                                  (True, False, False), (True, True, True)],
                         ids=["params_only", "weight_only", "bias_only", "input_only", "all"])
@pytest.mark.parametrize("name", ["stick tiles (tiles, rows, stick) as rows (tiles*stick)",
                                  "two threads' chunks over stick tiles", "zero rows"])
def test_layer_norm_backward_outputs(instructions: str, weight: bool, want: tuple[bool, bool, bool], name: str) -> None:
    """grad_weight and grad_bias against aten, with or without grad_input (None: only the parameter
    gradients, still filled); zero rows give zero parameter gradients."""
    case = table_case(name, torch.float32, 3, seed=13)
    with row_math(instructions):
        check_layer_norm_backward(case, weight, want)


@MODES
def test_constant_rows_normalise_to_bias(instructions: str) -> None:
    """A row of one value has variance 0: rstd = 1/sqrt(eps), the output is the bias exactly."""
    x = torch.full((5, 24), 3.25)
    out, mean, rstd = torch.empty_like(x), torch.empty(5), torch.empty(5)
    bias = torch.randn(24)
    with row_math(instructions):
        _C._rows_layer_norm(x, out, torch.randn(24), bias, 0.01, mean, rstd, 1)
    assert torch.equal(mean, torch.full((5,), 3.25))
    assert_close(rstd, torch.full((5,), 10.0), 1e-6)
    assert torch.equal(out, bias.expand(5, 24))


# ---- sums -----------------------------------------------------------------------------------------


@MODES
@pytest.mark.parametrize("name", ["contiguous rows", "stick tiles (tiles, rows, stick) as rows (tiles*stick)",
                                  "transposed rows (row dim of stride 6)", "two threads' chunks"])
def test_float16_rows_sum_in_float32(instructions: str, name: str) -> None:
    """float16 values summed in float32: against float64 sums of the same values, far tighter than
    float16 accumulation could be."""
    case = table_case(name, torch.float16, 1, seed=17)
    x, sums = run_sum(case, random_values(case.shape, case.seed, 300.0, 20.0))
    assert sums.dtype == torch.float32
    ref = x.sum(-1)
    assert torch.all((sums.double() - ref).abs() <= 1e-6 * x.abs().sum(-1) + 1e-3)


@MODES
@pytest.mark.parametrize("length", [4099, 5000, 8192])
@pytest.mark.parametrize("stride", [1, 3])
def test_float16_ones_sum_past_float16_precision(instructions: str, length: int, stride: int) -> None:
    """A row of float16 ones sums to its length exactly (float16 accumulation would stop at 2048)."""
    buf = torch.full((2 * length * stride,), math.nan, dtype=torch.float16)
    x = buf.as_strided((2, length), (length * stride, stride))
    x.fill_(1.0)
    x[1].fill_(-0.5)
    sums = torch.full((2,), SENTINEL)
    with row_math(instructions):
        _C._rows_sum(x, sums, 1)
    assert sums.tolist() == [float(length), -0.5 * length]


@MODES
@pytest.mark.parametrize("divisor", [1, 3, 7, 150, 256, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("step", [1, 64], ids=["dense-out", "strided-out"])  # strided: Spyre's sparse result
def test_divided_sums_are_the_sums_divided_in_float32(instructions: str, divisor: int, dtype: torch.dtype,
                                                       step: int) -> None:
    """A mean's sums (``divisor`` its count) are the row sums divided by ATen in float32, bit for
    bit: the division is ATen's mean's own last step (0: 0/0 and x/0 as ATen gives them)."""
    case = table_case("two threads' chunks", dtype, 1, seed=divisor)
    x_values = random_values(case.shape, case.seed, 50.0)
    (x,) = run_views(case, [x_values], 0, lambda x: None)
    sums = torch.full((case.rows,), SENTINEL)
    buffer = torch.full((case.rows * step,), SENTINEL)
    divided = buffer[::step]
    with row_math(instructions):
        _C._rows_sum(x, sums, case.width)
        _C._rows_sum(x, divided, case.width, divisor)
    expected = sums / divisor if divisor != 1 else sums
    assert torch.equal(divided.view(torch.int32), expected.view(torch.int32))
    if step > 1:  # nothing between the values written
        assert torch.all(buffer.view(case.rows, step)[:, 1:] == SENTINEL)


def row_view_of(values: torch.Tensor, case: Case, step: int, offset: int) -> torch.Tensor:
    """``values`` (one per row, host row order) placed ``step`` floats apart after ``offset`` in a
    sentinel buffer, as a row view of the case's shape: stride 0 along the row dims (how the
    runtime's front hands over layer norm's mean and rstd where the forward left them)."""
    width, outer = case.width, case.shape[:len(case.shape) - case.width]
    buffer = torch.full((offset + max(case.rows, 1) * step + 3,), SENTINEL)
    buffer[offset:offset + case.rows * step:step] = values.to(torch.float32)
    strides, acc = [], step
    for n in reversed(outer):
        strides.insert(0, acc)
        acc *= n
    return buffer.as_strided(case.shape, tuple(strides) + (0,) * width, offset)


def check_backward_row_views(case: Case, weight: bool, rms: bool, step: int, offset: int) -> None:
    """Layer norm's (and RMS norm's) backward given mean and rstd as row views gives the bits it
    gives them as (rows,) vectors: every grad_input element, grad_weight and grad_bias."""
    case = replace(case, tail=-1, dtype=torch.float32)
    x_values = random_values(case.shape, case.seed, 1.0, 0.5)
    rows = x_values.reshape(-1, case.full)
    mean, rstd = layer_norm_stats(rows, 1e-5)
    if rms:
        mean = torch.zeros_like(mean)
    w, _ = affine_params(case, weight, False)
    results = []
    for as_views in (False, True):
        gw = torch.full((case.length,), SENTINEL) if weight else None
        gb = torch.full((case.length,), SENTINEL) if weight and not rms else None
        m32, r32 = mean.to(torch.float32), rstd.to(torch.float32)
        if as_views:  # rms: the mean's view holds rstd, which the kernel must not read as a mean
            m32, r32 = row_view_of(rstd if rms else mean, case, step, offset), row_view_of(rstd, case, step + 1, 0)

        def call(g, x, gi, m32=m32, r32=r32, gw=gw, gb=gb):
            _C._rows_layer_norm_backward(g, x, m32, r32, w, gi, gw, gb, case.width, rms=rms)

        views = run_views(case, [random_values(case.shape, case.seed + 3), x_values], 1, call)
        results.append([bits(as_rows(views[2], case).float())] + [bits(t) for t in (gw, gb) if t is not None])
    for vectors, row_views in zip(*results):
        assert torch.equal(vectors, row_views)


@MODES
@given(case=cases(3, dtypes=(torch.float32,), tails=False), weight=st.booleans(), rms=st.booleans(),
       step=st.integers(1, 40), offset=st.integers(0, 9))
def test_backward_reads_mean_and_rstd_as_row_views(instructions: str, case: Case, weight: bool, rms: bool, step: int,
                                                   offset: int) -> None:
    with row_math(instructions):
        check_backward_row_views(case, weight, rms, step, offset)


@MODES
@pytest.mark.parametrize("name", ["two threads' chunks over stick tiles", "batch rows adjacent over two threads' chunks",
                                  "batch rows adjacent under two outer dims", "contiguous rows"])
def test_backward_row_views_on_table_geometries(instructions: str, name: str) -> None:
    with row_math(instructions):
        for rms in (False, True):
            check_backward_row_views(table_case(name, torch.float32, 3, seed=3), True, rms, 32, 5)


SPARSE_TABLE = ["two threads' chunks", "two threads' chunks over stick tiles",
                "batch rows adjacent over two threads' chunks", "stick tiles with a batch dim", "row of length 1"]


def check_sparse(case: Case, offset: int, step: int, pad: float, kind: str) -> None:
    """A sparse result (a value per row at offset + i * step, ``pad`` everywhere else) holds, bit
    for bit, the values the kernel writes into a dense out, and the padding in every other element
    of the buffer, the head before row 0 and the tail after the last row included."""
    values = random_values(case.shape, case.seed, 30.0)
    (x,) = run_views(case, [values], 0, lambda x: None)
    dense = torch.full((case.rows,), SENTINEL)
    buffer = torch.full((offset + case.rows * step + 5,), SENTINEL)
    calls = {"sum": lambda out, sparse=None: _C._rows_sum(x, out, case.width, sparse=sparse),
             "mean": lambda out, sparse=None: _C._rows_sum(x, out, case.width, 7, sparse=sparse),
             "max": lambda out, sparse=None: _C._rows_extreme(x, out, case.width, True, sparse=sparse),
             "min": lambda out, sparse=None: _C._rows_extreme(x, out, case.width, False, sparse=sparse)}
    calls[kind](dense)
    calls[kind](torch.empty(0), (buffer, offset, step, pad))
    at = offset + torch.arange(case.rows) * step
    assert torch.equal(bits(buffer[at]), bits(dense)), "a row's value differs from the dense result's"
    padding = torch.ones(buffer.numel(), dtype=torch.bool)
    padding[at] = False
    assert torch.all(bits(buffer[padding]) == bits(torch.tensor([pad]))), "an element of the padding is not pad"


@MODES
@pytest.mark.parametrize("name", SPARSE_TABLE)
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min"])
def test_sparse_results_hold_the_values_and_padding_everywhere_else(instructions: str, name: str, kind: str) -> None:
    with row_math(instructions):
        check_sparse(table_case(name, torch.float32, 1, seed=len(name)), 3, 32, 0.0, kind)


@MODES
@given(case=cases(1, dtypes=(torch.float32, torch.float16), tails=False), offset=st.integers(0, 40),
       step=st.integers(1, 40), pad=st.sampled_from([0.0, -1.5, math.inf]),
       kind=st.sampled_from(["sum", "mean", "max", "min"]))
def test_sparse_results_on_any_geometry(instructions: str, case: Case, offset: int, step: int, pad: float,
                                        kind: str) -> None:
    assume(case.rows > 0)
    with row_math(instructions):
        check_sparse(case, offset, step, pad, kind)


# ---- contract: dtypes, shapes, widths, per-row and per-column operands ----------------------------


def _views(dtype=torch.float32, shape=(4, 3, 8)):
    return torch.randn(shape).to(dtype)


def _f32(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(n, dtype=dtype)


# (what is wrong, call, pattern the ValueError must match); views are (4, 3, 8): 4 rows of 24 with width 2
ERRORS = [
    ("float64 input", lambda: _C._rows_softmax(_views(torch.float64), _views(), 2, False, False), "Double"),
    ("int32 out", lambda: _C._rows_softmax(_views(), _views(torch.int32), 2, False, False), "Int"),
    ("float64 grad", lambda: _C._rows_softmax_backward(_views(torch.float64), _views(), _views(), 2, False), "Double"),
    ("float8 output", lambda: _C._rows_softmax_backward(_views(), _views(torch.float8_e4m3fn), _views(), 2, True),
     "Float8_e4m3fn"),
    ("int64 layer norm input", lambda: _C._rows_layer_norm(_views(torch.int64), _views(), None, None, 1e-5, _f32(4),
                                                            _f32(4), 2), "Long"),
    ("float64 layer norm grad_input", lambda: _C._rows_layer_norm_backward(
        _views(), _views(), _f32(4), _f32(4), None, _views(torch.float64), None, None, 2), "Double"),
    ("float64 sum input", lambda: _C._rows_sum(_views(torch.float64), _f32(4), 2), "Double"),
    ("out of another shape", lambda: _C._rows_softmax(_views(), _views(shape=(2, 3, 8)), 2, False, False),
     r"\[2, 3, 8\]"),
    ("output of another shape", lambda: _C._rows_softmax_backward(_views(), _views(shape=(4, 8, 3)), _views(), 2,
                                                                    False), r"\[4, 8, 3\]"),
    ("grad_input of another shape", lambda: _C._rows_layer_norm_backward(
        _views(), _views(), _f32(4), _f32(4), None, _views(shape=(4, 24)), None, None, 2), r"\[4, 24\]"),
    ("width 0", lambda: _C._rows_softmax(_views(), _views(), 0, False, False), "width 0"),
    ("width past the dims", lambda: _C._rows_softmax(_views(), _views(), 4, False, False), "width 4"),
    ("negative width", lambda: _C._rows_sum(_views(), _f32(4), -1), "width -1"),
    ("negative divisor", lambda: _C._rows_sum(_views(), _f32(4), 2, -3), "divisor.*-3"),
    ("sum's length past the row", lambda: _C._rows_sum(_views(), _f32(4), 2, length=25), "real length.*25"),
    ("extreme's length 0", lambda: _C._rows_extreme(_views(), _f32(4), 2, True, length=0), "real length.*got 0"),
    ("sparse result too small", lambda: _C._rows_sum(_views(), _f32(0), 2, sparse=(_f32(3), 0, 1, 0.0)),
     "3 floats cannot hold 4 rows"),
    ("sparse result of step 0", lambda: _C._rows_extreme(_views(), _f32(0), 2, True, sparse=(_f32(9), 0, 0, 0.0)),
     "step 0"),
    ("mean row view float16", lambda: _C._rows_layer_norm_backward(
        _views(), _views(), _views(torch.float16, (4, 1, 1)).expand(4, 3, 8), _views(shape=(4, 1, 1)).expand(4, 3, 8),
        None, None, None, None, 2), "mean must be float32"),
    ("mean row view varying along the row", lambda: _C._rows_layer_norm_backward(
        _views(), _views(), _views(), _views(), None, None, None, None, 2), "one value per row"),
    ("sparse result float16", lambda: _C._rows_sum(_views(), _f32(0), 2, sparse=(_f32(9, torch.float16), 0, 1, 0.0)),
     "float32"),
    ("width 5 in backward", lambda: _C._rows_softmax_backward(_views(), _views(), _views(), 5, True), "width 5"),
    ("width 0 in layer norm", lambda: _C._rows_layer_norm(_views(), _views(), None, None, 1e-5, _f32(4), _f32(4), 0),
     "width 0"),
    ("mean too short", lambda: _C._rows_layer_norm(_views(), _views(), None, None, 1e-5, _f32(3), _f32(4), 2), "mean"),
    ("rstd float64", lambda: _C._rows_layer_norm(_views(), _views(), None, None, 1e-5, _f32(4),
                                                 _f32(4, torch.float64), 2), "rstd"),
    ("mean not contiguous", lambda: _C._rows_layer_norm(_views(), _views(), None, None, 1e-5, _f32(8)[::2], _f32(4),
                                                        2), "mean"),
    ("weight of another length", lambda: _C._rows_layer_norm(_views(), _views(), _f32(23), None, 1e-5, _f32(4),
                                                             _f32(4), 2), "weight"),
    ("bias float16", lambda: _C._rows_layer_norm(_views(), _views(), None, _f32(24, torch.float16), 1e-5, _f32(4),
                                                 _f32(4), 2), "bias"),
    ("backward mean too long", lambda: _C._rows_layer_norm_backward(
        _views(), _views(), _f32(5), _f32(4), None, None, _f32(24), None, 2), "mean"),
    ("backward rstd bfloat16", lambda: _C._rows_layer_norm_backward(
        _views(), _views(), _f32(4), _f32(4, torch.bfloat16), None, None, _f32(24), None, 2), "rstd"),
    ("backward weight of another length", lambda: _C._rows_layer_norm_backward(
        _views(), _views(), _f32(4), _f32(4), _f32(8), None, _f32(24), None, 2), "weight"),
    ("grad_weight of another length", lambda: _C._rows_layer_norm_backward(
        _views(), _views(), _f32(4), _f32(4), None, None, _f32(25), None, 2), "grad_weight"),
    ("grad_bias float64", lambda: _C._rows_layer_norm_backward(
        _views(), _views(), _f32(4), _f32(4), None, None, None, _f32(24, torch.float64), 2), "grad_bias"),
    ("sums of another length", lambda: _C._rows_sum(_views(), _f32(12), 2), "out"),
    ("sums float16", lambda: _C._rows_sum(_views(), _f32(4, torch.float16), 2), "out"),
]


@pytest.mark.parametrize("call,pattern", [(c, p) for _, c, p in ERRORS], ids=[n for n, _, _ in ERRORS])
def test_bad_operands_raise_value_error(call, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        call()


def test_bad_operands_leave_outputs_alone() -> None:
    """A refused call writes nothing: the checks come before any row is computed."""
    out, mean = torch.full((4, 3, 8), SENTINEL), torch.full((4,), SENTINEL)
    with pytest.raises(ValueError, match="rstd"):
        _C._rows_layer_norm(_views(), out, None, None, 1e-5, mean, _f32(5), 2)
    assert torch.all(out == SENTINEL) and torch.all(mean == SENTINEL)


def test_set_math_returns_the_old_set_and_refuses_unknown_ones() -> None:
    old = _C._rows_set_math("portable")
    try:
        assert _C._rows_set_math(SETS[0]) == "portable"
        assert _C._rows_set_math("portable") == SETS[0]
        with pytest.raises(ValueError, match="avx9000"):
            _C._rows_set_math("avx9000")
        assert _C._rows_set_math("portable") == "portable"  # the refused call changed nothing
    finally:
        _C._rows_set_math(old)


ZERO_LENGTH_SCRIPT = textwrap.dedent("""
    import torch
    from torch_layouts import _C
    x, out = torch.randn(3, 0), torch.empty(3, 0)
    print("softmax", flush=True)
    _C._rows_softmax(x, out, 1, False, False)
    print("softmax_backward", flush=True)
    _C._rows_softmax_backward(x, x, out, 1, True)
    print("sum", flush=True)
    sums = torch.full((3,), 7.0)
    _C._rows_sum(x, sums, 1)
    assert sums.tolist() == [0.0, 0.0, 0.0], sums
    print("sparse sum", flush=True)
    buffer = torch.full((10,), 7.0)
    _C._rows_sum(x, torch.empty(0), 1, sparse=(buffer, 1, 3, -1.0))
    assert buffer.tolist() == [-1.0, 0.0, -1.0, -1.0, 0.0, -1.0, -1.0, 0.0, -1.0, -1.0], buffer
    print("done", flush=True)
""")


def test_rows_of_length_zero() -> None:
    """A row dim of size 0 (3 rows of nothing) is a valid shape: softmax has nothing to write and the
    row sums are 0, like torch.sum over an empty dim (a sparse result too, its padding written). Run
    in a child process: a crash must fail this test, not the session."""
    assert torch.equal(torch.randn(3, 0).sum(-1), torch.zeros(3))
    proc = subprocess.run([sys.executable, "-c", ZERO_LENGTH_SCRIPT], capture_output=True, text=True, timeout=120)
    reached = proc.stdout.split()
    assert proc.returncode == 0 and reached[-1:] == ["done"], (
        f"exit status {proc.returncode} during {reached[-1] if reached else 'import'}\n{proc.stderr[-2000:]}")


@MODES
def test_every_float16_converts_exactly(instructions: str) -> None:
    """All 65536 float16 bit patterns (subnormals, infinities, NaNs included) reach the row math
    as their exact float32 values: each one summed with three zeros, in every lane position."""
    halves = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    expected = halves.float()
    with row_math(instructions):
        for lane in range(4):
            x = torch.zeros(65536, 4, dtype=torch.float16)
            x[:, lane] = halves
            sums = torch.empty(65536)
            _C._rows_sum(x, sums, 1)
            same = (sums == expected) | (sums.isnan() & expected.isnan())
            assert bool(same.all()), halves[~same][:8]


@MODES
def test_exp_is_within_two_ulp_over_its_range(instructions: str) -> None:
    """The row math's ``exp``, read through log_softmax's backward (``g - exp(y) * sum(g)`` with ``g``
    one-hot at the last element gives ``-exp(y)`` elsewhere): within 2 ulp of the exact value for
    every normal result from e^-103.9 to e^88.7, within one subnormal step below, 0 for -inf."""
    y = torch.cat([torch.linspace(-103.9, 88.7, 1 << 18), torch.tensor([-INF, 0.0])]).reshape(1, -1)
    g = torch.zeros_like(y)
    g[0, -1] = 1.0
    out = torch.empty_like(y)
    with row_math(instructions):
        _C._rows_softmax_backward(g, y, out, 1, True)
    got, exact = -out[0, :-1].double(), y[0, :-1].double().exp()
    normal = exact >= torch.finfo(torch.float32).tiny
    spacing = torch.pow(2.0, (torch.frexp(exact[normal].float())[1] - 24).double())  # float32's ulp there
    assert float(((got[normal] - exact[normal]).abs() / spacing).max()) <= 2.0
    assert float((got[~normal] - exact[~normal]).abs().max()) <= 2.0 ** -149
    assert got[-1] == 0.0  # exp(-inf)
