"""The ``_foreach_*`` ops on device tensors against the same ops on CPU tensors, bit for bit:
every registered overload over lists that mix tensors whose buffers line up (one CPU call on
the raw buffers, padded layouts included, their padding restored), other dim orders and views
(tensor by tensor); and the optimizers that call them."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import padding_holds_pad_value
from torch_layouts import SpyreTensorLayout
from torch_layouts.ops import foreach
from torch_layouts.ops.foreach import OPS

F32 = torch.float32

# Tensors of each list index: (shape, dim_order or None, a transposed view?, pad value)
ENTRIES = {
    "lined-up": ((256,), None, False, 0.0),
    "matrix": ((64, 96), None, False, 0.0),
    "padded": ((5, 70), None, False, 0.0),
    "pad-value": ((3, 10), None, False, 7.0),  # ops that change padding (add_.Scalar) must restore it
    "dim-order": ((40, 64), [1, 0], False, 0.0),
    "view": ((64, 32), None, True, 0.0),
    "mismatch": ((64, 64), [1, 0], False, 0.0),  # no padding either way: the first list default, the others not
    "packed": ((48,), None, False, 0.0),  # the first list 2 sticks of 32, the others 3 of 16 (packed_gradient)
}


def device(t: torch.Tensor, order: list[int] | None, transposed: bool, pad_value: float = 0.0) -> torch.Tensor:
    if transposed:
        return t.t().contiguous().to("spyre").t()
    if order is None and pad_value == 0:
        return t.to("spyre")
    return t.to("spyre", device_layout=SpyreTensorLayout(tuple(t.shape), t.dtype, order, pad_value=pad_value))


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def packed_gradient(host: torch.Tensor) -> torch.Tensor:
    """``host`` (48 elements) on the device as MultiheadAttention's ``in_proj_bias`` gradient is
    laid out: reduced from a (6, 2, 3, 16) buffer, 3 sticks of 16, where the bias has 2 sticks of 32."""
    batch = torch.zeros(6, 2, 3, 16)
    batch[0, 0] = host.view(3, 16)
    return batch.to("spyre").view(6, 2, 48).sum((0, 1))


def lists(names: list[str], count: int, seed: int) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]]]:
    """``count`` CPU lists and their device copies, index i shaped as ``ENTRIES[names[i]]``."""
    gen = torch.Generator().manual_seed(seed)
    host = [[torch.rand(ENTRIES[n][0], generator=gen) + 0.5 for n in names] for _ in range(count)]
    dev = [[packed_gradient(t) if n == "packed" and k else
            device(t, *(ENTRIES[n][1:] if n != "mismatch" or k else (None, False, 0.0))) for t, n in zip(row, names)]
           for k, row in enumerate(host)]
    return host, dev


def arguments(spec, host_lists, dev_lists, n: int):
    """The op's arguments on the CPU and on the device (scalars shared)."""
    host_args, dev_args, li = [], [], 0
    for kind in spec.kinds:
        if kind == "L":
            host_args.append(host_lists[li])
            dev_args.append(dev_lists[li])
            li += 1
        elif kind == "SL":
            scalars = [0.25 + 0.5 * i for i in range(n)]
            host_args.append(scalars)
            dev_args.append(scalars)
        elif spec.name.endswith(".Tensor"):
            host_args.append(torch.tensor(1.5))
            dev_args.append(torch.tensor(1.5))
        else:
            host_args.append(0.75)
            dev_args.append(0.75)
    return host_args, dev_args


@pytest.mark.parametrize("spec", OPS, ids=[s.name for s in OPS])
@pytest.mark.parametrize("names", [["lined-up", "matrix"], list(ENTRIES)], ids=["lined-up", "mixed"])
def test_foreach_matches_cpu(spec, names):
    count = spec.kinds.count("L")
    host_lists, dev_lists = lists(names, count, seed=len(spec.name))
    host_args, dev_args = arguments(spec, host_lists, dev_lists, len(names))
    op = getattr(torch.ops.aten, spec.name.split(".")[0])
    overload = getattr(op, spec.name.split(".")[1] if "." in spec.name else "default")
    torch_layouts.reset_stats()
    dev_out = overload(*dev_args)
    host_out = overload(*host_args)
    assert torch_layouts.stats()["fallbacks"] == {}
    got = dev_lists[0] if spec.inplace else dev_out
    want = host_lists[0] if spec.inplace else host_out
    for g, w in zip(got, want):
        assert g.device.type == "spyre" and g.shape == w.shape
        assert torch.equal(bits(g.cpu()), bits(w))
        assert padding_holds_pad_value(g)
    for dev_list, host_list in zip(dev_lists[1:], host_lists[1:]):  # the other lists are untouched
        for g, w in zip(dev_list, host_list):
            assert torch.equal(bits(g.cpu()), bits(w))
    lined = sum(n != "view" for n in names)  # whole tensors ("mismatch": the others copied first)
    assert torch_layouts.stats()["kernel_calls"].get("aten::" + spec.name, 0) == (1 if lined else 0)


def test_plans_are_kept_apart_by_how_many_lists_of_how_many_tensors():
    """One list of two tensors and two lists of one tensor each hold the same tensors in the same
    order: each call has its own plan (found by the property test below)."""
    a, b = torch.randn(4, 64), torch.randn(4, 64)
    da, db = a.to("spyre"), b.to("spyre")
    torch._foreach_add_([da, db], 1.0)
    torch._foreach_add_([da], [db])
    assert torch.equal(da.cpu(), (a + 1) + (b + 1)) and torch.equal(db.cpu(), b + 1)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(list(ENTRIES)), min_size=1, max_size=6), st.integers(0, len(OPS) - 1))
def test_foreach_property(names, which):
    """Any mix of lined-up and other tensors, in any order: the CPU's results bit for bit."""
    spec = OPS[which]
    host_lists, dev_lists = lists(names, spec.kinds.count("L"), seed=which)
    host_args, dev_args = arguments(spec, host_lists, dev_lists, len(names))
    overload = getattr(getattr(torch.ops.aten, spec.name.split(".")[0]),
                       spec.name.split(".")[1] if "." in spec.name else "default")
    dev_out, host_out = overload(*dev_args), overload(*host_args)
    got = dev_lists[0] if spec.inplace else dev_out
    want = host_lists[0] if spec.inplace else host_out
    for g, w in zip(got, want):
        assert torch.equal(bits(g.cpu()), bits(w)) and padding_holds_pad_value(g)


@pytest.mark.parametrize("make", [lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                                  lambda p: torch.optim.Adam(p, lr=0.01),
                                  lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)],
                         ids=["SGD", "Adam", "AdamW"])
def test_optimizers_take_the_foreach_kernels(make):
    """Three optimizer steps on the device give the CPU's parameters bit for bit, through the
    foreach kernels (no CPU fallback)."""
    torch.manual_seed(0)
    host = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.LayerNorm(96), torch.nn.Linear(96, 70))
    dev = copy.deepcopy(host).to("spyre")
    opt_h, opt_d = make(host.parameters()), make(dev.parameters())
    assert opt_d.defaults.get("foreach") in (None, True)
    torch_layouts.reset_stats()
    for step in range(3):
        grads = [torch.randn(p.shape, generator=torch.Generator().manual_seed(step * 10 + i))
                 for i, p in enumerate(host.parameters())]
        for p, q, g in zip(host.parameters(), dev.parameters(), grads):
            p.grad, q.grad = g.clone(), g.to("spyre")
        opt_h.step()
        opt_d.step()
    assert torch_layouts.stats()["fallbacks"] == {}
    assert any(k.startswith("aten::_foreach") for k in torch_layouts.stats()["kernel_calls"])
    for p, q in zip(host.parameters(), dev.parameters()):
        assert torch.equal(bits(q.detach().cpu()), bits(p.detach()))


@pytest.mark.parametrize("make", [lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                                  lambda p: torch.optim.Adam(p, lr=0.01),
                                  lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)],
                         ids=["sgd-momentum", "adam", "adamw"])
def test_optimizer_steps_with_packed_bias_gradients(make):
    """Attention's packed projection: its bias gradient arrives in 3 sticks of 16 where the bias
    has 2 of 32. Three steps (the first planned, the others replayed) read it in place, no copy,
    and give the CPU's parameters bit for bit."""
    torch.manual_seed(1)
    host = [torch.nn.Parameter(torch.randn(48, 16)), torch.nn.Parameter(torch.randn(48))]
    dev = [torch.nn.Parameter(p.detach().to("spyre")) for p in host]
    opt_h, opt_d = make(host), make(dev)
    for step in range(3):
        grads = [torch.randn(p.shape, generator=torch.Generator().manual_seed(step * 10 + i)) for i, p in enumerate(host)]
        for p, g in zip(host, grads):
            p.grad = g.clone()
        dev[0].grad, dev[1].grad = grads[0].to("spyre"), packed_gradient(grads[1])
        torch_layouts.reset_stats()
        opt_d.step()
        opt_h.step()
        assert torch_layouts.stats()["d2d_bytes"] == 0 and torch_layouts.stats()["fallbacks"] == {}
        for p, q in zip(host, dev):
            assert torch.equal(bits(q.detach().cpu()), bits(p.detach())) and padding_holds_pad_value(q.detach())


def test_a_tensor_in_two_lists_of_another_layout():
    """Adam's ``addcmul_(exp_avg_sq, grad, grad)`` with a gradient in another dim order than the
    state (a strided view of it would transpose): copied once into the state's layout, the CPU's
    result bit for bit."""
    g = torch.randn(64, 64)
    state = torch.rand(64, 64)
    dg = g.to("spyre", device_layout=SpyreTensorLayout((64, 64), F32, [1, 0]))
    ds = [state.to("spyre")]
    torch_layouts.reset_stats()
    torch._foreach_addcmul_(ds, [dg], [dg], value=0.001)
    torch._foreach_addcmul_([state], [g], [g], value=0.001)
    assert torch_layouts.stats()["kernel_calls"] == {"aten::_foreach_addcmul_.Scalar": 1}
    assert torch_layouts.stats()["d2d_bytes"] == g.numel() * g.element_size()  # one copy
    assert torch.equal(bits(ds[0].cpu()), bits(state))


def test_a_gradient_whose_layout_differs_only_by_size_one_dims_lines_up(monkeypatch):
    """A bias gradient reduced from a batch keeps a size-1 device dim where the bias has none: the
    same bytes in the same order, so it is read where it lies, not copied first."""
    batch, bias = torch.randn(32, 128), torch.rand(128)
    grad = batch.to("spyre").sum(0, keepdim=True).view(128)  # as autograd reduces a bias gradient
    assert len(grad.device_tensor_layout().device_size) != len(bias.to("spyre").device_tensor_layout().device_size)
    copies = []
    monkeypatch.setattr(foreach, "new_tensor", lambda *a: copies.append(a))
    params = [bias.to("spyre")]
    torch._foreach_add_(params, [grad], alpha=-0.1)
    assert copies == []
    assert torch.equal(bits(params[0].cpu()), bits(bias.add(batch.sum(0), alpha=-0.1)))


def _python_entries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """With no plan or recipe kept, a list that grows by one each time a call of the foreach
    kernels enters Python (``foreach._columns``, which every lined-up call runs)."""
    foreach.PLANS.clear()
    torch_layouts.ops.elementwise.forget_recipes()
    entered: list[int] = []
    monkeypatch.setattr(foreach, "_columns", lambda *a, original=foreach._columns: entered.append(1) or original(*a))
    return entered


# In-place calls the runtime's front replays: id, the op on (lists, scalars), list count, whether it
# takes per-tensor scalars (which change from call to call, as Adam's step sizes do).
REPLAYED = [
    ("add_", lambda ls, s: torch._foreach_add_(ls[0], ls[1], alpha=0.5), 2, False),
    ("addcmul_", lambda ls, s: torch._foreach_addcmul_(ls[0], ls[1], ls[2], value=0.25), 3, False),
    ("lerp_", lambda ls, s: torch._foreach_lerp_(ls[0], ls[1], 0.1), 2, False),
    ("addcdiv_-scalar-list", lambda ls, s: torch._foreach_addcdiv_(ls[0], ls[1], ls[2], s), 3, True),
    ("mul_-scalar", lambda ls, s: torch._foreach_mul_(ls[0], 0.9), 1, False),
    ("add_-scalar-changes-padding", lambda ls, s: torch._foreach_add_(ls[0], 1.5), 1, False),
    ("zero_", lambda ls, s: torch._foreach_zero_(ls[0]), 1, False),
]


@pytest.mark.parametrize("_, fn, count, scalars", [c for c in REPLAYED if c[2] > 1], ids=[c[0] for c in REPLAYED
                                                                                          if c[2] > 1])
def test_inputs_of_another_layout_read_in_place_where_the_order_agrees(_, fn, count, scalars, monkeypatch):
    """A gradient whose layout splits the shape as the parameter's does, walked in the same order
    (3 sticks of 16 against 2 of 32), is read through a strided view of its own buffer, in the first
    call and in the front's replays: no copy or relayout, the CPU's bits, the padding untouched."""
    _python_entries(monkeypatch)  # no plan or recipe kept from other tests
    gen = torch.Generator().manual_seed(count)
    for call in range(3):
        host = [[torch.rand(48, generator=gen) + 0.5, torch.rand(64, 32, generator=gen)] for _ in range(count)]
        dev = [[k[0].to("spyre"), k[1].to("spyre")] for k in host[:1]]
        dev += [[packed_gradient(k[0]), k[1].to("spyre")] for k in host[1:]]
        assert dev[-1][0].device_tensor_layout() != dev[0][0].device_tensor_layout()
        per_tensor = [0.5 + call, 1.5] if scalars else None
        torch_layouts.reset_stats()
        fn(dev, per_tensor)
        assert torch_layouts.stats()["d2d_bytes"] == 0 and torch_layouts.stats()["relayouts"] == 0
        fn(host, per_tensor)
        for dev_list, host_list in zip(dev, host):
            for g, w in zip(dev_list, host_list):
                assert torch.equal(bits(g.cpu()), bits(w)) and padding_holds_pad_value(g)


@pytest.mark.parametrize("names", [["lined-up", "matrix"], ["padded", "pad-value", "mismatch"]],
                         ids=["lined-up", "padded-and-copied"])
@pytest.mark.parametrize("_, fn, count, scalars", REPLAYED, ids=[c[0] for c in REPLAYED])
def test_the_runtime_front_replays_lined_up_calls(_, fn, count, scalars, names, monkeypatch):
    """After the first call of a geometry, in-place calls whose every index lines up run without
    entering Python: the CPU's bits, padding restored, the other lists untouched, each call counted."""
    entered = _python_entries(monkeypatch)
    torch_layouts.reset_stats()
    for call in range(3):
        host_lists, dev_lists = lists(names, count, seed=call)
        per_tensor = [0.5 + call + i for i in range(len(names))] if scalars else None
        fn(dev_lists, per_tensor)
        fn(host_lists, per_tensor)
        for dev_list, host_list in zip(dev_lists, host_lists):
            for g, w in zip(dev_list, host_list):
                assert torch.equal(bits(g.cpu()), bits(w)) and padding_holds_pad_value(g)
    assert len(entered) == 1
    assert sum(torch_layouts.stats()["kernel_calls"].values()) == 3


@pytest.mark.parametrize("names", [["lined-up", "matrix"], ["padded", "pad-value", "dim-order"], ["lined-up", "view"]],
                         ids=["lined-up", "padded-and-ordered", "a-transposed-view"])
def test_the_runtime_front_replays_out_of_place_sqrt(names, monkeypatch):
    """``_foreach_sqrt`` (Adam's) whose every index lines up runs without entering Python after
    its first call of a geometry: new results in the inputs' layouts holding the CPU's bits, their
    padding the pad value, the inputs untouched, each call counted; a list with an index that does
    not line up (a transposed view) keeps the Python kernel."""
    entered = _python_entries(monkeypatch)
    torch_layouts.reset_stats()
    for call in range(3):
        (host,), (dev,) = lists(names, 1, seed=call)
        before = [bits(t.cpu()) for t in dev]
        got = torch._foreach_sqrt(dev)
        for g, t, h, b in zip(got, dev, host, before):
            assert torch.equal(bits(g.cpu()), bits(torch.sqrt(h))) and padding_holds_pad_value(g)
            assert g.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
            assert foreach.flat(t) is None or g.device_tensor_layout() == t.device_tensor_layout()
            assert torch.equal(bits(t.cpu()), b)
    assert len(entered) == (3 if "view" in names else 1)
    assert torch_layouts.stats()["kernel_calls"]["aten::_foreach_sqrt"] == 3


def test_replayed_calls_lend_the_lists_tensors_without_references():
    """A replayed call reads its lists' tensors where the call's stack holds them and lends the CPU
    op views borrowed for the call: after every call each tensor's C++ and Python reference counts
    are as before, the CPU's bits, a tensor that two lists (or one list twice) hold included."""
    foreach.PLANS.clear()
    torch.manual_seed(0)
    host_p = [torch.randn(64, 32), torch.randn(10)]
    host_g = [torch.randn(64, 32), torch.randn(10)]
    params, grads = [t.to("spyre") for t in host_p], [t.to("spyre") for t in host_g]

    def counts() -> list[tuple[int, int]]:
        return [(t._use_count(), sys.getrefcount(t)) for t in params + grads]

    before = counts()
    for _ in range(3):
        torch._foreach_add_(params, grads, alpha=-0.1)
        torch._foreach_add_(host_p, host_g, alpha=-0.1)
        torch._foreach_addcmul_(params, grads, grads, value=0.01)
        torch._foreach_addcmul_(host_p, host_g, host_g, value=0.01)
        torch._foreach_add_([params[0], params[0]], [grads[0], grads[0]])
        torch._foreach_add_([host_p[0], host_p[0]], [host_g[0], host_g[0]])
        assert counts() == before
    for d, h in zip(params, host_p):
        assert torch.equal(bits(d.cpu()), bits(h))


# An SGD step's _foreach_add_(params, grads, alpha=-lr), replayed: the runtime adds the runs itself
# (csrc/foreach_recipe.cpp) with the rounding of ATen's kernels, fused on AVX2 and AVX-512, the CPU
# op's own where ATen runs its DEFAULT kernels.
ADD_SCRIPT = """
import torch, torch_layouts
shapes = [(5, 70), (48,), (33,), (64, 96)]
gen = torch.Generator().manual_seed(0)
for call in range(3):
    host = [torch.randn(s, generator=gen) for s in shapes]
    grads = [torch.randn(s, generator=gen) * 1e3 for s in shapes]
    dev, dgrads = [t.to("spyre") for t in host], [g.to("spyre") for g in grads]
    torch_layouts.reset_stats()
    torch._foreach_add_(dev, dgrads, alpha=-0.1)
    torch._foreach_add_(host, grads, alpha=-0.1)
    assert torch_layouts.stats()["kernel_calls"] == {"aten::_foreach_add_.List": 1}
    for d, h in zip(dev, host):
        assert torch.equal(d.cpu().view(torch.int32), h.view(torch.int32)), (call, d.shape)
print("ok", torch.backends.cpu.get_cpu_capability())
"""


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_replayed_sgd_adds_round_as_atens_kernels(capability):
    """Under each of ATen's CPU capabilities (one this CPU lacks falls back to a lower one), the
    replayed ``_foreach_add_`` with alpha gives the CPU op's bits, ragged tails included."""
    import os
    import subprocess
    from pathlib import Path
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    proc = subprocess.run([sys.executable, "-c", ADD_SCRIPT], cwd=Path(__file__).resolve().parents[1], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


def test_replayed_adds_read_a_sparse_gradient_in_place():
    """A gradient in Spyre's sparse result layout (a stick-dim sum's: a value per stick) is read
    through a strided view of its buffer, in the first call and in the front's replays: no copy,
    the CPU's bits, the parameter's padding untouched."""
    gen = torch.Generator().manual_seed(3)
    x, p = torch.randn(70, 32, generator=gen), torch.randn(70, generator=gen)
    dp, grad = p.to("spyre"), x.to("spyre").sum(-1)
    assert grad.device_tensor_layout().device_size[-1] == 32  # a value per stick of 32
    for _ in range(3):
        torch_layouts.reset_stats()
        torch._foreach_add_([dp], [grad], alpha=-0.1)
        p.add_(x.sum(-1), alpha=-0.1)
        assert torch_layouts.stats()["d2d_bytes"] == 0
        assert torch.equal(bits(dp.cpu()), bits(p)) and padding_holds_pad_value(dp)
