"""Matrix multiplication on device memory: ``mm``, ``bmm``, ``addmm``, ``mv`` (``matmul``
and ``linear`` reach them through PyTorch's own decompositions).

Spyre's documented rule: ``C[m, n] = A[m, k] @ B[k, n]`` wants A sticked on k, B and C sticked
on n, and B's k dim padded to whole sticks whose padded entries are zero before the op
runs. Here:

* A is read in the default layout of its shape (``[..., k tiles, m, stick]``); any
  buffer it can be read from with its stick on k works in place (when k is not a
  multiple of the stick, only A's own buffer, whose k padding is zero).
* B is read in ``rhs_layout(shape)``: the default layout of its shape (sticked on n)
  with its k device dim padded to a multiple of the stick. When k is a multiple of the
  stick that is the default layout and any buffer with its stick on n works; otherwise
  B must be exactly in that layout (its zero padding is what the GEMM multiplies A's
  k padding with).
* Operands that break the rule are restickified (counted), or rejected in
  ``strict_layouts()``; e.g. ``linear``'s ``weight.t()`` is sticked on k, so a weight
  kept in ``SpyreTensorLayout(w.shape, w.dtype, [1, 0])`` avoids a restickify per call.
  An operand the GEMM packs anyway is read where it lies: its restickify and the packing
  are one copy.

float32 products run on the tile GEMM (``csrc/tile_gemm.cpp``, docs/design.md "Tile GEMM"):
A, B and C are handed to it as strided views of their buffers, grouped into batch, rows and
columns, and nothing is gathered; a transposed operand is its transpose's tiles with rows and
columns swapped, packed by the GEMM (the restickify the rule asks for, counted). Other dtypes,
hosts without AVX2/FMA and products with every dim from ``BLAS_FROM_DIM`` call the BLAS over
the padded dims, as the hardware would: A's tiles are gathered into a dense ``(m, k_padded)``
matrix. With few tiles of n (and A small enough to stay in cache), B's tiles ``[n tiles,
k_padded, stick]`` feed one GEMM each, writing C's tiles in place (a batched GEMM, no copy of B
or C). Otherwise B is gathered into a dense ``(k_padded, n_padded)`` matrix too, one dense
matmul computes C's padded tiles, and their real elements are scattered into C's device
buffer. ``addmm``'s bias row is added by the GEMM itself, as on the CPU. The dense matrices
live in device memory (``operands.scratch``), like a kernel's scratchpad.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

import torch

from ..core.dtypes import data_format, elems_per_stick
from ..core.layout import BoundLayout, DeviceLayout
from ..spyre import SpyreTensorLayout
from . import rules
from .. import _C
from .elementwise import ADD, MUL, broadcast_shape, copy_real, fill_, materialize, operand_view, run
from .operands import (Read, ViewPlan, default_coords, factored_read, has_padding, in_place, is_whole_dense, keep, layouts_of,
                       new_tensor, plan, plan_key, raw, raw_view, read_of, record_of, rowmajor, runtime_record, scratch,
                       view)
from .registry import register
from .stats import count_restickify
from .strided import strided_copy
from .view_copy import strided_or_staged

Shape = tuple[int, ...]
# Tile GEMMs (one per tile of n, each repacking A inside the BLAS) beat one GEMM on packed copies
# of B and C while A stays in cache and there are few tiles.
TILE_GEMM_BYTES = 8 << 20
TILE_GEMM_TILES = 4
# float32 products run on the tile GEMM (csrc/tile_gemm.cpp) where the CPU has AVX2 and FMA,
# unless every dim is this large: there the packing copies cost less than the BLAS's faster kernel
# gains (benchmarks/RESULTS.md).
TILE_GEMM = _C._tile_gemm_available()
BLAS_FROM_DIM = 1536


@functools.lru_cache(maxsize=1024)
def rhs_layout(size: Shape, dtype: torch.dtype) -> DeviceLayout:
    """The layout matmul reads B (``(..., k, n)``) in: default, k padded to whole sticks."""
    base = default_coords(size, dtype).layout
    eps = elems_per_stick(dtype)
    k = size[-2]
    padded = -(-k // eps) * eps
    if padded == k:
        return base
    device_size = list(base.device_size)
    device_size[len(size) - 1 if len(size) == 2 else len(size) - 3] = padded
    return SpyreTensorLayout(device_size, base.stride_map, data_format(dtype))


@functools.lru_cache(maxsize=16)
def _matrix_order(rank: int) -> tuple[int, ...]:
    """Device dims of a default layout of this rank, as (batch..., rows, tiles, stick)."""
    return (rank - 1, *range(rank - 2), rank - 2, rank)


def _refined_plan(t: torch.Tensor, coords: BoundLayout, exact: bool) -> tuple[ViewPlan | None, bool]:
    """``t``'s refined plan in ``coords`` and whether ``t`` breaks the rule there: no plan, its
    stick elsewhere, or (``exact``: k is padded) a buffer that is not the coordinates' own with
    zero padding."""
    p = plan(t, coords, refine=True)
    breaks = p is None or not p.stick_ok or (exact and (not p.exact or record_of(t).layout.pad_value != 0))
    return p, breaks


def _readable(op: str, named: list[tuple[str, torch.Tensor]], i: int, coords: BoundLayout, exact: bool,
              requirement: str, refine: bool, effects: list[Effect] | None = None) -> tuple[torch.Tensor, ViewPlan]:
    """Operand ``i`` and its plan in ``coords``. One that breaks the rule (its stick elsewhere)
    is restickified (counted; strict mode raises). With ``refine`` a refined plan reads the
    operand as it is, for a kernel that copies it anyway (a restickify and that copy are one
    pass); without, an operand that only a refined plan reads is first copied into the
    coordinates (a relayout that keeps the stick: not a restickify). With ``exact`` (k is
    padded) the buffer must be the coordinates' own, zero padded."""
    name, t = named[i]
    p, breaks = _refined_plan(t, coords, exact)
    if breaks:
        _restickified(op, named, i, requirement, coords.layout, effects)
    if p is not None and (refine and not exact or not breaks and p.shape is None):
        return t, p
    t = materialize(t, coords)
    return t, plan(t, coords)


class Tiles(NamedTuple):
    """An operand as a strided view of its device buffer whose dims form three groups, each
    enumerated row-major: batch dims, the dims of the matrix's rows, those of its columns
    (``(..., rows, padded cols)`` when gathered; see ``csrc/tile_gemm.h``); ``staged``: the
    coordinates the operand was first copied into (``materialize``), whose buffer the view reads."""

    view: torch.Tensor
    batch: tuple[int, ...]
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    staged: BoundLayout | None = None

    def groups(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return self.batch, self.rows, self.cols

    def transposed(self) -> Tiles:
        return Tiles(self.view, self.batch, self.cols, self.rows, self.staged)

    def dense(self, device: torch.device, batch: Shape) -> torch.Tensor:
        """The matrix gathered into a dense ``(*batch, rows, padded cols)`` scratch on ``device``
        (for BLAS); ``batch`` is the op's batch shape, which the view's batch dims may split."""
        tiles = self.view.permute(*self.batch, *self.rows, *self.cols)
        dense = strided_copy(scratch(tiles.shape, tiles.dtype, device), tiles)
        nb = len(self.batch)
        return dense.view(*batch, math.prod(dense.shape[nb:nb + len(self.rows)]), -1)


@functools.lru_cache(maxsize=256)
def _matrix_groups(rank: int, counts: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The batch, row and column dims of a view of a default layout of this rank whose device
    dim ``d`` splits into ``counts[d]`` factor dims."""
    first = [sum(counts[:d]) for d in range(len(counts))]
    dims = [tuple(range(first[d], first[d] + counts[d])) for d in _matrix_order(rank)]
    nb = rank - 2
    return sum(dims[:nb], ()), dims[nb], dims[nb + 1] + dims[nb + 2]


def _tiles(t: torch.Tensor, coords: BoundLayout, p: ViewPlan) -> Tiles:
    """The tiles ``p`` reads of ``t`` in ``coords`` (a default layout), grouped as a matrix."""
    return Tiles(p.read(t, coords), *_matrix_groups(len(coords.size), p.factors or (1,) * len(coords.shape)))


def _operand(op: str, named: list[tuple[str, torch.Tensor]], i: int, coords: BoundLayout, exact: bool,
             requirement: str, effects: list[Effect] | None = None, packed: bool = False) -> Tiles:
    """Operand ``i`` read in ``coords`` (see ``_readable``), or as the transpose of its
    transpose's tiles (``_flipped``); restickifies the rule asks for go to ``effects``. With
    ``packed`` (the tile GEMM, which packs what it reads), an operand that would be copied into
    ``coords`` first is read as the strided view of its buffer in its own shape where it is one
    (``_strided``)."""
    flipped = None if exact else _flipped(op, named, i, coords, requirement, effects)
    if flipped is not None:
        return flipped
    if packed:
        strided = _strided(op, named, i, coords, exact, requirement, effects)
        if strided is not None:
            return strided
    t, p = _readable(op, named, i, coords, exact, requirement, True, effects)
    return _tiles(t, coords, p)._replace(staged=None if t is named[i][1] else coords)


def _strided(op: str, named: list[tuple[str, torch.Tensor]], i: int, coords: BoundLayout, exact: bool,
             requirement: str, effects: list[Effect] | None) -> Tiles | None:
    """An operand that breaks the rule and that no plan reads in ``coords`` (a head-split view:
    a stick holding two heads), or whose k must be padded, as the strided view of its buffer in
    its own shape, dims split where their offsets step unevenly (``operands.factored_read``):
    the restickify the rule asks for (counted; strict mode raises) is done by the GEMM's
    packing, which reads only the k real columns. None where the operand reads in place, or no
    strided view holds it."""
    t = named[i][1]
    p, breaks = _refined_plan(t, coords, exact)
    if not breaks or (p is not None and not exact):
        return None  # read in place (a refined plan: the packing copies it anyway)
    factored = factored_read(t)
    if factored is None:
        return None
    _restickified(op, named, i, requirement, coords.layout, effects)
    first = list(itertools.accumulate(factored.counts, initial=0))
    groups = [tuple(range(first[d], first[d + 1])) for d in range(t.dim())]
    return Tiles(raw_view(t, *factored.read), sum(groups[:-2], ()), groups[-2], groups[-1])


class Effect(NamedTuple):
    """A restickify the rule asks for: operand ``operand`` breaks ``requirement`` (strict mode
    raises when ``checked``: the operand is its buffer's whole tensor) and moves ``nbytes``."""

    operand: int
    requirement: str
    layout: DeviceLayout
    checked: bool
    nbytes: int

    def replay(self, op: str, named: list[tuple[str, torch.Tensor]]) -> None:
        if self.checked:
            rules.check(op, self.requirement, named, named[self.operand][0], self.layout)
        count_restickify(self.nbytes)


def _restickified(op: str, named: list[tuple[str, torch.Tensor]], i: int, requirement: str, layout: DeviceLayout,
                  effects: list[Effect] | None) -> None:
    t = named[i][1]
    info = record_of(t)
    effect = Effect(i, requirement, layout, info is not None and is_whole_dense(t, info), t.numel() * t.element_size())
    effect.replay(op, named)
    if effects is not None:
        effects.append(effect)


class GemmPlan(NamedTuple):
    """A tile GEMM call of one geometry, kept when its operands were read where they lie or
    copied whole into coordinates (k padded, a restickify): A and B as views of their raw
    buffers (or of their copies') with their dim groups and the coordinates of the copy (None:
    none), the restickifies to count again, the result's coordinates and dim groups, the read of a
    bias row the GEMM adds (None: no bias); ``layouts`` keeps the operands' layout objects alive,
    so that the ids in the key stay theirs."""

    reads: tuple[tuple[Read, tuple[tuple[int, ...], ...], BoundLayout | None], ...]
    effects: tuple[Effect, ...]
    layouts: tuple
    c_coords: BoundLayout
    c_groups: tuple[tuple[int, ...], ...]
    bias_read: Read | None

    def replay(self, op: str, named: list[tuple[str, torch.Tensor]]) -> list[Tiles]:
        for effect in self.effects:
            effect.replay(op, named)
        return [Tiles(raw_view(t if staged is None else materialize(t, staged), *read), *groups)
                for (_, t), (read, groups, staged) in zip(named, self.reads)]

    def run(self, op: str, named: list[tuple[str, torch.Tensor]], bias: torch.Tensor | None, mnk: tuple[int, int, int],
            beta: float, alpha: float) -> torch.Tensor:
        a, b = self.replay(op, named)
        out = new_tensor(self.c_coords, named[0][1].device)
        row = None if self.bias_read is None else raw_view(bias, *self.bias_read)
        _C._tile_gemm(raw_view(out, self.c_coords.shape), self.c_groups, a.view, a.groups(), b.view, b.groups(), *mnk,
                      alpha, False, row, beta)
        return out


PLANS: dict[tuple, GemmPlan] = {}
MAX_PLANS = 512


def _call_key(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float, alpha: float
              ) -> tuple | None:
    """A matmul call's key for its kept plan (None when a tensor has no layout)."""
    if bias is None:
        return plan_key(op, (beta, alpha), (a, b))
    return plan_key(op, (beta, alpha), (a, b, bias))


def _remember(key: tuple | None, named: list[tuple[str, torch.Tensor]], tiles: list[Tiles],
              effects: list[Effect], c_coords: BoundLayout, bias: torch.Tensor | None, bias_read: Read | None) -> None:
    """Keep the plan of a call whose operands were read where they lie or copied whole into
    coordinates (``Tiles.staged``) and whose bias, if any, is a row the GEMM adds (or unused:
    ``beta`` 0)."""
    tensors = [t for _, t in named]
    unstaged = [(x.view, t) for x, t in zip(tiles, tensors) if x.staged is None]
    if key is None or not in_place([v for v, _ in unstaged], [t for _, t in unstaged]):
        return
    reads = tuple((read_of(x.view), x.groups(), x.staged) for x in tiles)
    keyed = tensors if bias is None else [*tensors, bias]  # every tensor whose layout id is in the key
    keep(PLANS, key, GemmPlan(reads, tuple(effects), layouts_of(keyed), c_coords,
                              _matrix_groups(len(c_coords.size), (1,) * len(c_coords.shape)), bias_read), MAX_PLANS)


def _offer(op: str, kept: GemmPlan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
           mnk: tuple[int, int, int], beta: float, alpha: float) -> None:
    """Offer the runtime's front the replay of the ``mm``/``bmm``/``addmm`` call it serves
    (``csrc/gemm_recipe.cpp``): later calls of this geometry run the tile GEMM without Python."""
    if op not in ("mm", "bmm", "addmm"):
        return
    first = 1 if op == "addmm" else 0  # addmm(bias, mat1, mat2, beta, alpha)
    own = [(first, a), (first + 1, b)] + ([(0, bias)] if bias is not None else [])
    (a_read, a_groups, a_staged), (b_read, b_groups, b_staged) = kept.reads
    row = None if kept.bias_read is None else (0, kept.bias_read)
    a_at, b_at = (None if c is None else runtime_record(c) for c in (a_staged, b_staged))
    _C._offer_gemm("aten::" + op, own, (first, a_read, a_groups, a_at), (first + 1, b_read, b_groups, b_at), row,
                   runtime_record(kept.c_coords), kept.c_coords.shape, kept.c_groups, *mnk, alpha, beta,
                   [e.nbytes for e in kept.effects])


def _flipped(op: str, named: list[tuple[str, torch.Tensor]], i: int, coords: BoundLayout, requirement: str,
             effects: list[Effect] | None = None) -> Tiles | None:
    """An operand sticked on its rows (``weight.t()``, ``grad.t()``) as the transpose of its
    transpose's tiles. It is the restickify the rule asks for (counted; strict mode raises),
    done by the GEMM's packing. None when the operand is sticked on its columns, or either
    arrangement has padding."""
    name, t = named[i]
    direct = plan(t, coords)
    if direct is not None and direct.stick_ok or has_padding(coords):
        return None
    flipped = t.transpose(-2, -1)
    flipped_coords = default_coords(tuple(flipped.shape), t.dtype)
    p = plan(flipped, flipped_coords, refine=True)
    if p is None or not p.stick_ok or has_padding(flipped_coords):
        return None
    _restickified(op, named, i, requirement, coords.layout, effects)
    return _tiles(flipped, flipped_coords, p).transposed()


def matmul(op: str, a: torch.Tensor, b: torch.Tensor, names: tuple[str, str] = ("self", "mat2"),
           bias: torch.Tensor | None = None, beta: float = 1, alpha: float = 1) -> torch.Tensor:
    """``a @ b`` for ``(..., m, k)`` and ``(..., k, n)`` device tensors with equal batch dims;
    with a ``bias`` (2-D only), ``beta * bias + alpha * (a @ b)``."""
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")
    if a.dim() < 2 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"{op}: shapes {list(a.shape)} and {list(b.shape)} cannot be multiplied")
    batch, m, k, n = tuple(a.shape[:-2]), a.shape[-2], a.shape[-1], b.shape[-1]
    named = [(names[0], a), (names[1], b)]
    key = _call_key(op, a, b, bias, beta, alpha) if a.dtype == torch.float32 and TILE_GEMM else None
    kept = PLANS.get(key) if key is not None else None
    if kept is not None:
        _offer(op, kept, a, b, bias, (m, n, k), beta, alpha)  # the runtime's front had no replay for it
        return kept.run(op, named, bias, (m, n, k), beta, alpha)
    dtype = a.dtype
    eps = elems_per_stick(dtype)
    out_shape = (*batch, m, n)
    c_coords = default_coords(out_shape, dtype)
    out = new_tensor(c_coords, a.device)
    if 0 in out_shape:
        return out
    if k == 0:
        out = fill_(out, 0)
        return out if bias is None else _epilogue(out, bias, beta, alpha)
    padded_k = k % eps != 0
    b_size = tuple(b.shape)
    a_coords = default_coords(tuple(a.shape), dtype)
    a_rule = "mat1 sticked on k (its last dim) in the default layout"
    b_coords = BoundLayout(rhs_layout(b_size, dtype), b_size, rowmajor(b_size))
    b_rule = "mat2 sticked on n (its last dim), with k padded to whole sticks of zeros"
    if dtype != torch.float32 and op != "mv":
        done = _cpu_gemm(op, named, out, c_coords, bias, beta, alpha,
                         ((a_coords, padded_k, a_rule), (b_coords, padded_k, b_rule)))
        if done is not None:
            return done
    if dtype == torch.float32 and TILE_GEMM and min(m, n, k) < BLAS_FROM_DIM:
        effects: list[Effect] = []
        tiles = [_operand(op, named, 0, a_coords, padded_k, a_rule, effects, packed=True),
                 _operand(op, named, 1, b_coords, padded_k, b_rule, effects, packed=True)]
        out, bias_row = _tile_gemm(out, c_coords, *tiles, (m, n, k), bias, beta, alpha)
        live = bias is not None and beta != 0
        if not live or bias_row is not None and in_place([bias_row], [bias]):
            _remember(key, named, tiles, effects, c_coords, bias, read_of(bias_row) if live else None)
            if key in PLANS:
                _offer(op, PLANS[key], a, b, bias, (m, n, k), beta, alpha)
        return out
    dense_a = _operand(op, named, 0, a_coords, padded_k, a_rule).dense(a.device, batch)
    tiles_of_n = -(-n // eps)
    if not batch and tiles_of_n <= TILE_GEMM_TILES and dense_a.numel() * dense_a.element_size() <= TILE_GEMM_BYTES:
        # C's tiles [n tiles, m, stick] = A @ B's tiles [n tiles, k, stick]: B and C in place.
        b, p = _readable(op, named, 1, b_coords, padded_k, b_rule, refine=False)
        tiles = view(b, b_coords, p)
        c_tiles = raw(out).view(c_coords.shape)
        a_tiles = dense_a.expand(tiles.shape[0], *dense_a.shape)
        bias_tiles = None if bias is None else _bias_tiles(bias, c_coords, out_shape)
        if bias_tiles is None:
            torch.bmm(a_tiles, tiles, out=c_tiles)
        else:
            torch.baddbmm(bias_tiles, a_tiles, tiles, beta=beta, alpha=alpha, out=c_tiles)
        if has_padding(c_coords):
            _C._fill_padding(out)
        return out if bias is None or bias_tiles is not None else _epilogue(out, bias, beta, alpha)
    # Dense (contiguous) operands: the CPU's half-precision GEMMs sum in another order for a
    # transposed one, and a restickified operand (compiled plans) arrives contiguous.
    dense_b = _operand(op, named, 1, b_coords, padded_k, b_rule).dense(a.device, batch)
    product = scratch((*batch, m, dense_b.shape[-1]), dtype, a.device)
    bias_row = None if bias is None else _bias_row(bias, c_coords, out_shape)
    if bias_row is None:
        torch.matmul(dense_a, dense_b, out=product)
    else:
        torch.addmm(bias_row.expand(product.shape), dense_a, dense_b, beta=beta, alpha=alpha, out=product)
    product = product.view(*batch, m, -1, eps)
    order = _matrix_order(len(out_shape))
    in_device_order = product.permute([order.index(d) for d in range(len(order))])
    copy_real(raw(out).view(c_coords.shape), in_device_order, c_coords, out)
    return out if bias is None or bias_row is not None else _epilogue(out, bias, beta, alpha)


CPU_GEMMS = {"mm": torch.ops.aten.mm.out, "bmm": torch.ops.aten.bmm.out, "addmm": torch.ops.aten.addmm.out}


def _cpu_gemm(op: str, named: list[tuple[str, torch.Tensor]], out: torch.Tensor, c_coords: BoundLayout,
              bias: torch.Tensor | None, beta: float, alpha: float,
              rules_: tuple[tuple[BoundLayout, bool, str], ...]) -> torch.Tensor | None:
    """A product the tile GEMM does not take (half precision) as the CPU's own ``mm``/``bmm``/
    ``addmm`` out= overload on row-major strided views of the operands where they lie, else on
    row-major dense copies (``view_copy.strided_or_staged``; an operand that breaks the rule in
    ``rules_`` is copied, its restickify counted; strict mode raises), the result written through
    its view or a dense copy moved into C's layout: the CPU's bits for contiguous operands, and a
    transposed operand gives what its restickified copy gives (a compiled plan's). The recipe is
    offered to the runtime's front, which replays later calls of this geometry with their copies
    and restickifies. None where some operand has no such read (an empty one)."""
    reads = []
    for i, (coords, exact, rule) in enumerate(rules_):
        t = named[i][1]
        breaks = _refined_plan(t, coords, exact)[1]
        if breaks:  # the copy below is the restickify (strict mode raises first)
            _restickified(op, named, i, rule, coords.layout, None)
        read = strided_or_staged(t, True, staged=breaks, row_major=True)
        if read is None:  # never for the non-empty operands matmul passes
            return None
        reads.append((read, t.numel() * t.element_size() if breaks else 0))
    if bias is not None:
        read = strided_or_staged(bias, True)
        if read is None:
            return None
        reads.insert(0, (read, 0))
    written = strided_or_staged(out, False)
    if written is None:
        return None
    views = [raw_view(t, *r) for (t, r, _), _ in reads]
    target = raw_view(written[0], *written[1])
    if bias is None:
        CPU_GEMMS[op](*views, out=target)
    else:
        CPU_GEMMS[op](*views, beta=beta, alpha=alpha, out=target)
    if written[2] is not None:
        out.copy_(written[0])
    args = [named[0][1], named[1][1]] if bias is None else [bias, named[0][1], named[1][1]]
    offered = [(i, *r) + (() if coords is None else (runtime_record(coords), nbytes))
               for i, ((_, r, coords), nbytes) in enumerate(reads)]
    _C._offer_recipe(args, offered, [runtime_record(c_coords)], [written[1]], [], f"aten::{op}.out",
                     staged_outs=[None if written[2] is None else runtime_record(written[2])])
    return out


def _tile_gemm(out: torch.Tensor, c_coords: BoundLayout, a: Tiles, b: Tiles, mnk: tuple[int, int, int],
               bias: torch.Tensor | None, beta: float, alpha: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``out`` (fresh, in ``c_coords``) := ``alpha * a @ b`` (+ ``beta * bias``) on the tile GEMM:
    A, B and C read and written where they lie. A bias row (``linear``'s) is added by the GEMM
    as it writes C; another bias readable in C's coordinates is written into C first and the
    product accumulated onto it, as the CPU's ``addmm`` does. Returns ``out`` and the bias row
    the GEMM added (None: none)."""
    c_tiles = raw(out).view(c_coords.shape)
    c_groups = _matrix_groups(len(c_coords.size), (1,) * len(c_coords.shape))
    live = bias is not None and beta != 0
    bias_row = _bias_row(bias, c_coords, tuple(out.shape)) if live else None
    bias_row = None if bias_row is None else bias_row.contiguous()
    bias_tiles = _bias_tiles(bias, c_coords, tuple(out.shape)) if live and bias_row is None else None
    if bias_tiles is not None:
        torch.mul(bias_tiles.expand(c_tiles.shape), beta, out=c_tiles)
    _C._tile_gemm(c_tiles, c_groups, a.view, a.groups(), b.view, b.groups(), *mnk, alpha, bias_tiles is not None,
                  bias_row, beta)
    if bias_tiles is not None and has_padding(c_coords):
        _C._fill_padding(out)
    if live and bias_row is None and bias_tiles is None:
        run(ADD, [out, bias], {"alpha": beta}, target=out)
    return out, bias_row


def _bias_row(bias: torch.Tensor, coords: BoundLayout, shape: Shape) -> torch.Tensor | None:
    """A bias that is one row of the 2-D result (``(n,)`` or ``(1, n)``) as a CPU ``(n tiles * stick,)``
    vector (None otherwise): the packed GEMM adds it, as the CPU's ``addmm`` does."""
    if len(shape) != 2 or bias.dim() == 0 or bias.shape[-1] != shape[-1] or math.prod(bias.shape) != shape[-1]:
        return None
    tiles = _bias_tiles(bias, coords, shape)
    return None if tiles is None else tiles[:, 0, :].reshape(-1)


def _bias_tiles(bias: torch.Tensor, coords: BoundLayout, shape: Shape) -> torch.Tensor | None:
    """A bias that broadcasts to the result as a view in the result's coordinates (None when
    it is not a device tensor of the result's dtype that can be read so)."""
    if bias.device.type != "spyre" or bias.dtype != coords.layout.dtype or bias.dim() == 0 or bias.dim() > 2:
        return None
    try:
        broadcast_shape([tuple(bias.shape), shape])
    except RuntimeError:
        return None
    return operand_view("addmm", [("self", bias)], coords, 0)


def _epilogue(out: torch.Tensor, bias: torch.Tensor, beta: float, alpha: float) -> torch.Tensor:
    if alpha != 1:
        run(MUL, [out, alpha], {}, target=out)
    if beta != 0:
        run(ADD, [out, bias], {"alpha": beta}, target=out)
    return out


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {a.dim()}-D and {b.dim()}-D")
    return matmul("mm", a, b)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() != 3 or b.dim() != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {a.dim()}-D and {b.dim()}-D")
    return matmul("bmm", a, b)


def mv(a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Matrix times vector: ``mm`` with the vector as an ``(m, 1)`` matrix (the result is
    that ``(n, 1)`` matrix's column, one element per stick)."""
    if a.dim() != 2 or v.dim() != 1:
        raise RuntimeError(f"mv: expected a 2-D matrix and a 1-D vector, got {a.dim()}-D and {v.dim()}-D")
    return matmul("mv", a, v.unsqueeze(1), ("self", "vec")).squeeze(1)


def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1
          ) -> torch.Tensor:
    """``beta * bias + alpha * (a @ b)``; the bias (any shape broadcasting to the result) is
    added in the result's coordinates."""
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"addmm: expected 2-D matrices, got {a.dim()}-D and {b.dim()}-D")
    return matmul("addmm", a, b, ("mat1", "mat2"), bias, beta, alpha)


def register_all() -> None:
    register("mm", mm)
    register("bmm", bmm)
    register("mv", mv)
    register("addmm", addmm)
