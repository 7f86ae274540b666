"""Layout propagation: the candidate layouts of every node of an ATen graph and the
layout each mode needs of its inputs, from the rules the eager kernels obey.

A node's layout is abstracted to a *state*: the dim of its tensor the stick runs
along (an ``int``), ``"sparse"`` (one element per stick, e.g. after reducing the
stick dim), ``("rhs", dim)`` (a matmul B sticked on n with k padded to whole
sticks), ``"nostick"`` (no usable stick: a view that lost it), ``"scalar"`` (at most
one element: fits every rule) or ``Fixed(layout)`` (another family's layout, only
converted where an op needs it). ``layout_of_state`` gives the concrete layout.

Rules (ops/elementwise.py, matmul.py, reductions.py, softmax.py):

* pointwise (and softmax-like): every operand and the result sticked on the same
  output dim; an operand broadcast along that dim must hold no stick of its own
  (``"sparse"``); the candidates are the operands' sticks and the last dim;
* ``mm``/``bmm``/``addmm``: A sticked on k, B and C on n, B ``("rhs", n)`` when k is
  not a multiple of the stick (a view A then is the kernel's to copy, if it must);
* reductions keep the input's stick, or give ``"sparse"`` when they reduce it;
* views keep their base's buffer: their stick is the base's, seen through the view;
* every other op runs on the CPU fallback: any input, the default layout out.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from ..core.dtypes import elems_per_stick
from ..core.layout import DeviceLayout
from ..ops import registry
from ..ops.matmul import rhs_layout
from ..ops.operands import stick_dim
from ..runtime.layout_records import default_layout
from ..spyre import MAX_RANK, SpyreTensorLayout
from .placement import ANY, Mode, PlanNode, Problem, State

INFEASIBLE = 10**18
SCALAR, SPARSE, NOSTICK = "scalar", "sparse", "nostick"
_REDUCTIONS = {"sum", "mean", "amax", "amin"}
_ALIASING = {"_unsafe_view"}  # not a view in its schema, but the runtime keeps the buffer and layout


class DynamicShapeError(NotImplementedError):
    """A graph value has a symbolic size or stride: its layouts cannot be planned."""


@dataclass(frozen=True)
class Fixed:
    """A layout the compiler keeps as it is (another family's, or an unusual Spyre one)."""

    layout: DeviceLayout

    def __repr__(self) -> str:
        return f"Fixed({self.layout})"


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: str


def tensor_info(node: torch.fx.Node) -> TensorInfo | tuple | None:
    """Shape/stride/dtype/device of a node's value (a tuple of them for multi-output ops)."""
    val = node.meta.get("val")
    return _info(val)


def _info(val: Any) -> TensorInfo | tuple | None:
    if isinstance(val, torch.Tensor):
        for n in (*val.shape, *val.stride()):
            if not isinstance(n, int):
                dims = [d for d, s in enumerate(val.shape) if not isinstance(s, int)]
                raise DynamicShapeError(
                    f"the spyre layout planner needs static shapes: a tensor of size {list(val.shape)} has "
                    f"symbolic dim(s) {dims}; compile with dynamic=False (or torch._dynamo.mark_static) "
                    "to get a layout plan")
        return TensorInfo(tuple(val.shape), tuple(val.stride()), val.dtype, val.device.type)
    if isinstance(val, (list, tuple)):
        return tuple(_info(v) for v in val)
    return None


def default_state(info: TensorInfo) -> State:
    """The state of a tensor in the default layout of its shape."""
    if _numel(info.shape) <= 1:
        return SCALAR
    if len(info.shape) > MAX_RANK:
        return Fixed(default_layout(info.shape, info.stride, info.dtype))
    return len(info.shape) - 1 if info.shape[-1] > 1 else NOSTICK


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def state_of_tensor(t: torch.Tensor) -> State:
    """The state of a real device tensor's layout."""
    layout = t.device_tensor_layout()
    if t.numel() <= 1:
        return SCALAR
    if isinstance(layout, SpyreTensorLayout):
        if layout.sparse:
            return SPARSE
        stick = stick_dim(t)
        if stick is None:
            return Fixed(layout)
        if t.dim() >= 2 and stick == t.dim() - 1 and t.is_contiguous():
            rhs = rhs_layout(tuple(t.shape), t.dtype)
            if layout == rhs and rhs != default_layout(tuple(t.shape), tuple(t.stride()), t.dtype):
                return ("rhs", stick)
        return stick
    return Fixed(layout)


def layout_of_state(shape: tuple[int, ...], dtype: torch.dtype, state: State,
                    stride: tuple[int, ...] | None = None) -> DeviceLayout:
    """The concrete layout of a tensor of ``shape`` (host ``stride``, default row-major) in ``state``."""
    if isinstance(state, Fixed):  # its own layout, not a cached equal one bound to another host
        return state.layout
    return _layout_of_state(shape, dtype, state, stride)


@functools.lru_cache(maxsize=4096)
def _layout_of_state(shape: tuple[int, ...], dtype: torch.dtype, state: State,
                     stride: tuple[int, ...] | None) -> DeviceLayout:
    rank = len(shape)
    contiguous = tuple(_numel(shape[d + 1:]) for d in range(rank))
    stride = contiguous if stride is None else stride
    if isinstance(state, tuple) and state[0] == "rhs" and stride == contiguous:
        return rhs_layout(shape, dtype)
    if rank == 0 or rank > MAX_RANK or state in (SCALAR, NOSTICK):
        return default_layout(shape, stride, dtype)
    if state == SPARSE:
        return SpyreTensorLayout(shape, stride, dtype, [*range(rank), -1])
    stick = state[1] if isinstance(state, tuple) else state
    order = [d for d in range(rank) if d != stick] + [stick]
    return SpyreTensorLayout(shape, stride, dtype, order)


def state_nbytes(info: TensorInfo, state: State) -> int:
    """Padded device bytes of a tensor in a state."""
    return layout_of_state(info.shape, info.dtype, state).nbytes


def _plain(state: State) -> State:
    """The stick dim of an ``("rhs", dim)`` state; other states as they are."""
    return state[1] if isinstance(state, tuple) and state[0] == "rhs" else state


def compatible(have: State, need: State) -> bool:
    """Whether a buffer in state ``have`` serves a need (an rhs buffer serves its stick)."""
    return have == need or (isinstance(have, tuple) and have[1] == need)


def _family(node: torch.fx.Node) -> str:
    """Which eager rule a node follows: view, pointwise, matmul, reduction, softmax, fallback."""
    target = node.target
    if target is operator.getitem:
        return "getitem"
    if not isinstance(target, torch._ops.OpOverload):
        return "fallback"
    packet = target._overloadpacket.__name__
    if target.is_view or packet in _ALIASING:
        return "view"
    overload = target._overloadname
    fn = registry._kernels.get(packet if overload == "default" else f"{packet}.{overload}")
    if fn is None:
        return "fallback"
    module = fn.__module__.rsplit(".", 1)[-1]
    if module == "elementwise":
        return "pointwise" if packet not in ("fill_", "zero_") else "fallback"
    if module == "softmax":
        return "layer_norm" if packet == "native_layer_norm" else "pointwise"
    if module == "reductions" and packet in _REDUCTIONS:
        return "reduction"
    if module == "matmul":
        return packet
    return "fallback"


class Propagation:
    """Builds the placement ``Problem`` of a graph: its nodes' modes and costs."""

    def __init__(self, gm: torch.fx.GraphModule, input_states: dict[str, State]) -> None:
        self.gm = gm
        self.infos: dict[str, Any] = {}
        self.alias_root: dict[str, str] = {}
        self.family: dict[str, str] = {}
        self.nodes: list[PlanNode] = []
        self.candidates: dict[str, list[State]] = {}
        for node in gm.graph.nodes:
            if node.op in ("output", "get_attr"):
                continue
            info = tensor_info(node)
            if info is None or (isinstance(info, TensorInfo) and info.device != "spyre"):
                continue
            if isinstance(info, tuple) and not any(isinstance(i, TensorInfo) for i in info):
                continue
            self.infos[node.name] = info
            self.family[node.name] = "input" if node.op == "placeholder" else _family(node)
            self.alias_root[node.name] = node.name
            if node.op == "placeholder":
                state = input_states.get(node.name)
                if state is None:
                    state = tuple(default_state(i) if i else SCALAR for i in info) if isinstance(info, tuple) \
                        else default_state(info)
                self._add(node.name, (), [Mode(state, ())])
            else:
                self._modes(node, info)
        self.problem = Problem(self.nodes, self.move_cost, compatible)

    # -- building ---------------------------------------------------------------------
    def _add(self, name: str, inputs: tuple[str, ...], modes: list[Mode]) -> None:
        unique: dict[Mode, None] = dict.fromkeys(modes)
        self.nodes.append(PlanNode(name, inputs, tuple(unique)))
        self.candidates[name] = list(dict.fromkeys(m.out for m in unique))

    def _operands(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """The node's tensor arguments that live on the device, in argument order."""
        found: list[torch.fx.Node] = []

        def visit(a: Any) -> None:
            if isinstance(a, torch.fx.Node):
                if a.name in self.infos and isinstance(self.infos[a.name], TensorInfo) and a not in found:
                    found.append(a)
            elif isinstance(a, (list, tuple)):
                for x in a:
                    visit(x)

        visit(node.args)
        visit(list(node.kwargs.values()))
        return found

    def _modes(self, node: torch.fx.Node, info: Any) -> None:
        family = self.family[node.name]
        operands = self._operands(node)
        names = tuple(o.name for o in operands)
        if family == "getitem":
            parent = node.args[0]
            index = node.args[1]
            if not isinstance(parent, torch.fx.Node) or parent.name not in self.infos:
                self._add(node.name, (), [Mode(default_state(info), ())])
                return
            modes = [Mode(s[index] if isinstance(s, tuple) else NOSTICK, (s,)) for s in self.candidates[parent.name]]
            self._add(node.name, (parent.name,), modes)
            return
        if isinstance(info, tuple):
            if family == "layer_norm" and operands:
                self._layer_norm(node, info, operands)
                return
            fallback = tuple(default_state(i) if isinstance(i, TensorInfo) else SCALAR for i in info)
            self._add(node.name, names, [Mode(fallback, (ANY,) * len(names))])
            return
        if family == "view" and operands:
            self._view(node, info, operands[0], names)
        elif family == "pointwise" and operands:
            self._pointwise(node, info, operands)
        elif family in ("mm", "bmm", "addmm") and len(operands) >= 2:
            self._matmul(node, info, operands, family)
        elif family == "reduction" and operands:
            self._reduction(node, info, operands[0])
        else:
            self._add(node.name, names, [Mode(default_state(info), (ANY,) * len(names))])

    def _view(self, node: torch.fx.Node, info: TensorInfo, base: torch.fx.Node, names: tuple[str, ...]) -> None:
        self.alias_root[node.name] = self.alias_root[base.name]
        binfo = self.infos[base.name]
        modes = []
        for state in self.candidates[base.name]:
            needs = tuple(state if n == base.name else ANY for n in names)
            modes.append(Mode(map_view(binfo, info, state), needs))
        self._add(node.name, names, modes)

    def _need_for(self, out: TensorInfo, stick: int, operand: TensorInfo) -> State:
        """What a pointwise op sticked on output dim ``stick`` needs of one operand."""
        if _numel(operand.shape) <= 1:
            return ANY
        d = stick - (len(out.shape) - len(operand.shape))
        if d < 0 or operand.shape[d] == 1:
            return SPARSE
        return d

    def _pointwise(self, node: torch.fx.Node, info: TensorInfo, operands: list[torch.fx.Node]) -> None:
        names = tuple(o.name for o in operands)
        if _numel(info.shape) <= 1:
            self._add(node.name, names, [Mode(SCALAR, (ANY,) * len(names))])
            return
        rank = len(info.shape)
        primary = [o for o in operands if self.infos[o.name].shape == info.shape]
        if not primary:
            self._add(node.name, names, [Mode(default_state(info), (ANY,) * len(names))])
            return
        dtype = self.infos[primary[0].name].dtype
        sticks: list[int] = []
        if not self._whole(primary[0].name):
            primary = []  # a partial view computes in the default layout of its shape (coords_for)
        for o in primary:
            for state in self.candidates[o.name]:
                s = _plain(state)
                if isinstance(s, int) and info.shape[s] > 1 and s not in sticks:
                    sticks.append(s)
        if info.shape[-1] > 1 and rank - 1 not in sticks:
            sticks.append(rank - 1)
        if not sticks:
            self._add(node.name, names, [Mode(default_state(info), (ANY,) * len(names))])
            return
        modes = []
        for s in sticks:
            needs = tuple(self._need_for(info, s, self.infos[n]) if self.infos[n].dtype == dtype else ANY
                          for n in names)
            modes.append(Mode(s, needs))
        if len(names) == 1 and primary and self.infos[names[0]].dtype == info.dtype:
            # one whole operand: the result takes its buffer's layout, whatever it is
            kept = self.candidates[names[0]]
            modes += [Mode(state, (state,)) for state in kept if not isinstance(_plain(state), int)]
        self._add(node.name, names, modes)

    def _whole(self, name: str) -> bool:
        """Whether a value is its whole buffer (itself, or a view covering all of it)."""
        root = self.alias_root.get(name, name)
        info, base = self.infos[name], self.infos.get(root)
        if root == name or not isinstance(base, TensorInfo):
            return True
        return _numel(info.shape) == _numel(base.shape) and all(
            st != 0 for n, st in zip(info.shape, info.stride) if n > 1)

    def _own(self, name: str) -> bool:
        """Whether a value is a buffer, not a view of one."""
        return self.alias_root.get(name, name) == name

    def _layer_norm(self, node: torch.fx.Node, info: tuple, operands: list[torch.fx.Node]) -> None:
        names = tuple(o.name for o in operands)
        x = operands[0]
        xinfo = self.infos[x.name]
        normalized = len(node.args[1]) if len(node.args) > 1 else 1
        first = len(xinfo.shape) - normalized
        modes = []
        for state in self.candidates[x.name]:
            if isinstance(state, int):
                side = SPARSE if state >= first else state
                out = (state, side, side)
            else:
                out = (NOSTICK, NOSTICK, NOSTICK)
            modes.append(Mode(out, tuple(state if n == x.name else ANY for n in names)))
        self._add(node.name, names, modes)

    def _matmul(self, node: torch.fx.Node, info: TensorInfo, operands: list[torch.fx.Node], op: str) -> None:
        names = tuple(o.name for o in operands)
        args = [a for a in node.args if isinstance(a, torch.fx.Node)]
        bias, a, b = (args[0], args[1], args[2]) if op == "addmm" else (None, args[0], args[1])
        ainfo, binfo = self.infos[a.name], self.infos[b.name]
        rank = len(info.shape)
        k = ainfo.shape[-1]
        eps = elems_per_stick(ainfo.dtype)
        need_b: State = ("rhs", rank - 1) if k % eps else rank - 1
        if binfo.shape[-1] <= 1:
            need_b = ANY
        # With k padded, a view A must also read exactly as a buffer of its shape; whether it
        # does depends on its base's arrangement, so that copy is left to the kernel (counted).
        need_a: State = rank - 1 if k > 1 and (k % eps == 0 or self._own(a.name)) else ANY
        need = {a.name: need_a}
        need[b.name] = need_b if b.name not in need else ANY
        if bias is not None and bias.name not in need:
            need[bias.name] = self._need_for(info, rank - 1, self.infos[bias.name]) if info.shape[-1] > 1 else ANY
        out = rank - 1 if info.shape[-1] > 1 else default_state(info)
        self._add(node.name, names, [Mode(out, tuple(need.get(n, ANY) for n in names))])

    def _reduction(self, node: torch.fx.Node, info: TensorInfo, x: torch.fx.Node) -> None:
        xinfo = self.infos[x.name]
        rank = len(xinfo.shape)
        dims = node.args[1] if len(node.args) > 1 and isinstance(node.args[1], (list, tuple)) else None
        if dims is None or len(dims) == 0:
            dims = list(range(rank))
        dims = sorted({d % max(rank, 1) for d in dims})
        keepdim = len(info.shape) == rank
        modes = []
        for state in self.candidates[x.name]:
            s = _plain(state)
            if _numel(info.shape) <= 1:
                out: State = SCALAR
            elif isinstance(s, int):
                out = SPARSE if s in dims else (s if keepdim else s - sum(d < s for d in dims))
            else:
                out = NOSTICK
            modes.append(Mode(out, (state,)))
        self._add(node.name, (x.name,), modes)

    # -- costs --------------------------------------------------------------------------
    def move_cost(self, name: str, source: State, target: State) -> int:
        info = self.infos[name]
        if isinstance(info, tuple) or isinstance(target, tuple) and target[0] != "rhs":
            return INFEASIBLE
        if target in (SCALAR, NOSTICK) or isinstance(target, Fixed):
            return INFEASIBLE
        return state_nbytes(info, source) + state_nbytes(info, target)


def map_view(base: TensorInfo, view: TensorInfo, state: State) -> State:
    """The state of a view of a tensor in ``state``: the base's stick seen through it."""
    if _numel(view.shape) <= 1:
        return SCALAR
    rhs = isinstance(state, tuple) and state[0] == "rhs"
    s = _plain(state)
    if not isinstance(s, int):
        return state
    unit = base.stride[s]
    for e, (n, st) in enumerate(zip(view.shape, view.stride)):
        if n > 1 and st == unit:
            if base.shape[s] % elems_per_stick(base.dtype) and n != base.shape[s]:
                return NOSTICK  # a padded stick merged with its neighbours: no stick of the view
            if rhs and view.shape == base.shape and e == s:
                return state
            return e
    return NOSTICK
