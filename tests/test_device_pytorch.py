"""Ordinary PyTorch code on the spyre device: ops through the CPU fallback, autograd, ``nn.Module``s,
printing, ``torch.save``/``torch.load``/``deepcopy`` with layouts and views, and PyTorch's own
device-generic test machinery instantiated for ``spyre``."""

from __future__ import annotations

import copy
import io
import pickle
import re

import pytest
import torch

import torch_layouts  # registers spyre before common_device_type looks for backends
from torch_layouts import SpyreTensorLayout, _C, htp
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

F16, F32 = torch.float16, torch.float32


def default_layout(t: torch.Tensor) -> SpyreTensorLayout:
    return SpyreTensorLayout(tuple(t.shape), tuple(t.stride()), t.dtype)


def bits(t: torch.Tensor) -> torch.Tensor:
    widths = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t if t.dtype == torch.bool else t.view(widths[t.element_size()])


# -- ops: the boxed CPU fallback, or device kernels -------------------------------------------------
A = torch.randn(4, 70)
B = torch.randn(70, 5)
IMG = torch.randn(2, 3, 8, 8)
W = torch.randn(4, 3, 3, 3)


def _inputs():
    """The inputs on the device; the first in a non-default layout."""
    return (A.to("spyre", device_layout=SpyreTensorLayout((4, 70), F32, [1, 0])), B.to("spyre"), IMG.to("spyre"))


# ops no device kernel is planned for: they must run through the boxed CPU fallback
FALLBACK = [
    ("unique", lambda a, b, i: a.round().unique(), "aten::_unique2"),
    ("histc", lambda a, b, i: a.histc(5), "aten::histc"),
    # (one non-negative integer index is index_select's on the device: tests/test_ops_indexing.py)
    ("index, negative", lambda a, b, i: a[:, torch.tensor([-3, 0, 3]).to(a.device)], "aten::index"),
    ("bucketize", lambda a, b, i: torch.bucketize(a, torch.tensor([-1.0, 0.0, 1.0]).to(a.device)), "aten::bucketize"),
    ("bicubic", lambda a, b, i: torch.nn.functional.interpolate(i, scale_factor=2, mode="bicubic"),
     "aten::upsample_bicubic2d"),
    ("bincount", lambda a, b, i: (a > 0).long().flatten().bincount(), "aten::bincount"),
    ("masked_select", lambda a, b, i: a[a > 0], "aten::index"),  # a bool mask: index.Tensor_out's fallback
    ("nonzero", lambda a, b, i: (a > 0).nonzero(), "aten::nonzero"),
    ("permuted input", lambda a, b, i: (a.t() > 0).nonzero(), "aten::nonzero"),
]


@pytest.mark.parametrize("name,op,aten", FALLBACK, ids=[f[0] for f in FALLBACK])
def test_fallback_results_are_device_tensors_with_default_layout(name, op, aten):
    dev = _inputs()
    _C._reset_stats()
    got = op(*dev)
    want = op(A, B, IMG)
    counts = _C._fallback_counts()
    assert any(k.startswith(aten) for k in counts), counts
    assert got.device == torch.device("spyre", 0) and got.dtype == want.dtype and got.shape == want.shape
    assert got.stride() == want.stride()
    assert got.device_tensor_layout() == default_layout(got)
    assert torch.equal(got.cpu(), want)
    assert torch.equal(dev[0].cpu(), A)  # inputs untouched


# ops that may have layout-aware device kernels: whatever runs them, values and device memory agree
ANY_OP = [
    ("add", lambda a, b, i: a + 2 * a),
    ("matmul", lambda a, b, i: a @ b),
    ("sum dim", lambda a, b, i: a.sum(1)),
    ("softmax", lambda a, b, i: torch.softmax(a, -1)),
    ("compare", lambda a, b, i: a > 0),
    ("argmax", lambda a, b, i: a.argmax(1)),
    ("where", lambda a, b, i: torch.where(a > 0, a, b.t()[:4])),
    ("half", lambda a, b, i: a.half() * 3),
    ("layer_norm", lambda a, b, i: torch.nn.functional.layer_norm(a, (70,))),
    ("mean of view", lambda a, b, i: a[1:, ::3].mean()),
    ("cat", lambda a, b, i: torch.cat([a, a[:1]])),
    ("sort", lambda a, b, i: a.sort(1).values),
    ("cumsum", lambda a, b, i: a.cumsum(1)),
    ("topk", lambda a, b, i: a.topk(3).indices),
    ("gather", lambda a, b, i: a.gather(1, torch.tensor([[1], [0], [2], [69]]).to(a.device))),
    ("tril of a permuted tensor", lambda a, b, i: a.t().tril()),
    ("flip", lambda a, b, i: a.flip(0)),
    ("roll", lambda a, b, i: a.roll(1, 0)),
    ("cumprod", lambda a, b, i: a.cumprod(1)),
    ("median", lambda a, b, i: a.median(1).indices),
    ("kthvalue", lambda a, b, i: a.kthvalue(2, 1).values),
    ("max_pool", lambda a, b, i: torch.nn.functional.max_pool2d(i, 2)),
    ("upsample", lambda a, b, i: torch.nn.functional.interpolate(i, scale_factor=2)),
]


@pytest.mark.parametrize("name,op", ANY_OP, ids=[f[0] for f in ANY_OP])
def test_ops_match_cpu(name, op):
    dev = _inputs()
    got = op(*dev)
    want = op(A, B, IMG)
    assert got.device == torch.device("spyre", 0) and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want)
    layout = got.device_tensor_layout()
    memory, host_map = torch_layouts.device_memory(got), layout.host_map()
    assert torch.equal(memory[host_map >= 0], got.cpu().reshape(-1)[host_map[host_map >= 0]])
    assert torch.equal(dev[0].cpu(), A)


def test_inplace_and_out_keep_the_tensors_layout():
    layout = SpyreTensorLayout((4, 70), F32, [1, 0], pad_value=-3)
    y = A.to("spyre", device_layout=layout)
    y.mul_(2).add_(1)
    y.clamp_(max=1.5)
    out = torch.empty(4, 70, device="spyre", device_layout=layout)
    torch.add(y, y, out=out)
    expected = (A * 2 + 1).clamp(max=1.5)
    for t, want in ((y, expected), (out, 2 * expected)):
        assert t.device_tensor_layout() == layout and torch.equal(t.cpu(), want)
        memory = torch_layouts.device_memory(t)
        assert bool((memory[layout.host_map() < 0] == -3).all())


def test_item_tolist_and_python_control_flow():
    y = torch.tensor([[1.5, -2.0], [3.0, 0.25]]).to("spyre", device_layout=SpyreTensorLayout((2, 2), F32, [1, 0]))
    assert y.tolist() == [[1.5, -2.0], [3.0, 0.25]] and y[1, 0].item() == 3.0
    assert bool(y.sum() > 2) and float(y.max()) == 3.0 and int(y.argmin()) == 1
    assert [float(v) for v in y[0]] == [1.5, -2.0]


def test_conv2d_forward_and_backward():
    w = W.clone().requires_grad_()
    ws = W.to("spyre").requires_grad_()
    out = torch.nn.functional.conv2d(IMG, w, padding=1)
    out_s = torch.nn.functional.conv2d(IMG.to("spyre"), ws, padding=1)
    torch.testing.assert_close(out_s.cpu(), out)
    out.square().sum().backward()
    out_s.square().sum().backward()
    torch.testing.assert_close(ws.grad.cpu(), w.grad)


# -- autograd -------------------------------------------------------------------------------------------
def test_autograd_matches_cpu():
    x = torch.randn(5, 70, requires_grad=True)
    w = torch.randn(70, 3, requires_grad=True)
    xs = x.detach().to("spyre", device_layout=SpyreTensorLayout((5, 70), F32, [1, 0])).requires_grad_()
    ws = w.detach().to("spyre").requires_grad_()
    loss = ((x[1:] @ w).tanh() * torch.arange(3.0)).sum()
    loss_s = ((xs[1:] @ ws).tanh() * torch.arange(3.0).to("spyre")).sum()
    loss.backward()
    loss_s.backward()
    assert loss_s.grad_fn is not None and loss_s.device.type == "spyre"
    torch.testing.assert_close(loss_s.cpu(), loss.detach())
    for got, want in ((xs.grad, x.grad), (ws.grad, w.grad)):
        assert got.device.type == "spyre" and _C._impl_carries_layout(got)
        torch.testing.assert_close(got.cpu(), want)
    assert xs.device_tensor_layout() == SpyreTensorLayout((5, 70), F32, [1, 0])


def test_gradients_flow_across_devices_and_layouts():
    x = torch.randn(3, 70, requires_grad=True)
    y = x.to("spyre", device_layout=SpyreTensorLayout((3, 70), F32, [1, 0]))  # H2D is differentiable
    z = y.to("spyre", device_layout=SpyreTensorLayout((3, 70), F32))  # relayout too
    (z * z).sum().backward()
    assert x.grad.device.type == "cpu" and torch.allclose(x.grad, 2 * x.detach())
    leaf = torch.randn(3, 70).to("spyre", device_layout=SpyreTensorLayout((3, 70), F32, [1, 0])).requires_grad_()
    moved = torch_layouts.to_layout(leaf, SpyreTensorLayout((3, 70), F32))
    (moved * 3).sum().backward()
    assert leaf.grad.device_tensor_layout() == leaf.device_tensor_layout()  # back in the source's layout
    assert torch.equal(leaf.grad.cpu(), torch.full((3, 70), 3.0))
    (leaf.cpu() * 2).sum().backward()  # D2H is differentiable
    assert torch.equal(leaf.grad.cpu(), torch.full((3, 70), 5.0))


# -- nn.Module ------------------------------------------------------------------------------------------
def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 16), torch.nn.LayerNorm(16),
        torch.nn.ReLU(), torch.nn.Linear(16, 10), torch.nn.LogSoftmax(-1))


def test_module_to_spyre_forward_backward_and_step():
    cpu, dev = _net(), _net().to("spyre")
    assert all(p.device.type == "spyre" and isinstance(p, torch.nn.Parameter) for p in dev.parameters())
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.1, momentum=0.9)
    target = torch.tensor([1, 3])
    for _ in range(2):
        for model, opt, device in ((cpu, opt_cpu, "cpu"), (dev, opt_dev, "spyre")):
            opt.zero_grad()
            out = model(IMG.to(device))
            torch.nn.functional.nll_loss(out, target.to(device)).backward()
            opt.step()
        torch.testing.assert_close(dev(IMG.to("spyre")).cpu(), cpu(IMG), atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(dev.named_parameters(), cpu.parameters()):
        assert p.grad.device.type == "spyre", name
        torch.testing.assert_close(p.cpu(), q, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=1e-5, rtol=1e-4)
    back = dev.cpu()
    assert all(p.device.type == "cpu" for p in back.parameters())


def test_batch_norm_running_statistics():
    cpu, dev = torch.nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4).to("spyre")
    x = torch.randn(8, 4)
    cpu(x)
    dev(x.to("spyre"))
    assert all(b.device.type == "spyre" for b in dev.buffers())
    torch.testing.assert_close(dev.running_mean.cpu(), cpu.running_mean)
    torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var)


def test_module_state_dict_round_trip():
    dev = _net().to("spyre")
    buffer = io.BytesIO()
    torch.save(dev.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert all(t.device.type == "spyre" for t in state.values())
    fresh = _net().to("spyre")
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(state)
    fresh.eval()
    dev.eval()
    assert torch.equal(fresh(IMG.to("spyre")).cpu(), dev(IMG.to("spyre")).cpu())


# -- printing -------------------------------------------------------------------------------------------
def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("x", [
    torch.tensor([1.5, -2.25, 3.0]), torch.randn(3, 70), torch.randn(2, 3).half(), torch.randn(4).bfloat16(),
    torch.arange(6).view(2, 3), torch.tensor([True, False]), torch.tensor(2.5), torch.empty(0, 3),
    torch.randn(40, 40), torch.tensor([float("nan"), float("inf"), -0.0]), torch.randn(2).requires_grad_(),
], ids=["floats", "wide", "half", "bfloat16", "int64", "bool", "0-d", "empty", "summarized", "special", "grad"])
def test_printing(x):
    y = x.detach().to("spyre").requires_grad_(x.requires_grad)
    text = repr(y)
    assert text.endswith("device='spyre:0')")  # last, as Torch-Spyre prints it
    assert _squash(re.sub(r",\s*device='spyre:0'", "", text)) == _squash(repr(x))
    assert str(y) == text and f"{y}" == (text if y.dim() else f"{x}")  # 0-d formats as its item


def test_printing_views_parameters_and_modules():
    y = torch.arange(12.0).view(3, 4).to("spyre", device_layout=SpyreTensorLayout((3, 4), F32, [1, 0]))
    assert repr(y[1:, ::2].t()) == "tensor([[ 4.,  8.],\n        [ 6., 10.]], device='spyre:0')"
    p = torch.nn.Parameter(torch.ones(2, device="spyre"))
    assert repr(p) == "Parameter containing:\ntensor([1., 1.], requires_grad=True, device='spyre:0')"
    assert "Linear(in_features=2" in repr(torch.nn.Linear(2, 3).to("spyre"))
    y2 = (y * 2).sum()
    assert repr(y2) == "tensor(132., device='spyre:0')"
    half = torch.tensor([1.234242424234, 2], dtype=torch.float16).to("spyre")
    assert repr(half) == "tensor([1.2344, 2.0000], dtype=torch.float16, device='spyre:0')"


# -- torch.save / torch.load / deepcopy -----------------------------------------------------------------
def _saved(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def _bit_tensors():
    raw = torch.randint(-2**15, 2**15, (6, 70), dtype=torch.int16)
    raw[0, :2] = torch.tensor([-2**15, -1])  # -0.0 and a NaN with a full payload
    return raw.view(F16)


def test_save_load_keeps_layout_values_and_padding():
    x = _bit_tensors()
    layout = SpyreTensorLayout((6, 70), F16, [1, 0], pad_value=-3)
    y = x.to("spyre", device_layout=layout)
    crouton = torch.randn(1, 3, 5, 30).to("spyre", device_layout=htp.R4CroutonLayout)
    loaded = _saved({"y": y, "crouton": crouton, "plain": x.to("spyre")})
    z = loaded["y"]
    assert z.device == y.device and z.device_tensor_layout() == layout
    assert torch.equal(bits(z.cpu()), bits(x))
    assert torch.equal(bits(torch_layouts.device_memory(z)), bits(torch_layouts.device_memory(y)))
    assert z.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
    assert loaded["crouton"].device_tensor_layout() == crouton.device_tensor_layout()
    assert torch.equal(loaded["crouton"].cpu(), crouton.cpu())
    assert loaded["plain"].device_tensor_layout() == default_layout(x)
    for where in ("spyre", torch.device("spyre", 0), {"spyre:0": "spyre:0"}, lambda storage, loc: storage.spyre()):
        again = _saved(y, map_location=where)
        assert again.device == y.device and again.device_tensor_layout() == layout
        assert torch.equal(bits(again.cpu()), bits(x))


def test_save_load_keeps_views_and_sharing():
    x = torch.randn(6, 70)
    y = x.to("spyre", device_layout=SpyreTensorLayout((6, 70), F32, [1, 0]))
    loaded = _saved({"base": y, "view": y[1:4, 5::3], "t": y.t(), "again": y[1:4, 5::3]})
    base, view = loaded["base"], loaded["view"]
    for name, want in (("view", x[1:4, 5::3]), ("t", x.t())):
        got = loaded[name]
        original = {"view": y[1:4, 5::3], "t": y.t()}[name]
        assert (got.shape, got.stride(), got.storage_offset()) == (
            original.shape, original.stride(), original.storage_offset())
        assert got.device_tensor_layout() == y.device_tensor_layout() and torch.equal(got.cpu(), want)
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    base.zero_()
    assert bool((view.cpu() == 0).all()) and bool((loaded["again"].cpu() == 0).all())
    assert bool((y.cpu() == x).all())  # the original is independent


def test_save_load_permuted_base():
    x = torch.randn(4, 6, 70).permute(2, 0, 1)
    y = x.to("spyre")
    assert y.stride() == x.stride()
    z = _saved(y)
    assert z.stride() == x.stride() and torch.equal(z.cpu(), x)
    c = _saved(y, map_location="cpu")
    assert c.device.type == "cpu" and c.stride() == x.stride() and torch.equal(c, x)


@pytest.mark.parametrize("map_location",
                         ["cpu", torch.device("cpu"), {"spyre:0": "cpu"}, lambda storage, loc: storage],
                         ids=["str", "device", "dict", "callable"])
def test_load_to_cpu(map_location):
    x = _bit_tensors()
    y = x.to("spyre", device_layout=SpyreTensorLayout((6, 70), F16, [1, 0]))
    loaded = _saved({"y": y, "view": y[2:, 1::2], "grad": x.float().to("spyre").requires_grad_()},
                    map_location=map_location)
    assert all(t.device.type == "cpu" for t in loaded.values())
    assert torch.equal(bits(loaded["y"]), bits(x)) and torch.equal(bits(loaded["view"]), bits(x[2:, 1::2]))
    assert loaded["view"].untyped_storage().data_ptr() == loaded["y"].untyped_storage().data_ptr()
    assert loaded["grad"].requires_grad and loaded["grad"].is_leaf


def test_load_weights_only_and_pickle():
    y = torch.randn(3, 70).to("spyre", device_layout=SpyreTensorLayout((3, 70), F32, [1, 0])).requires_grad_()
    z = _saved([y, y[1:]], weights_only=True)
    assert z[0].requires_grad and z[0].device_tensor_layout() == y.device_tensor_layout()
    assert torch.equal(z[1].detach().cpu(), y[1:].detach().cpu())
    p = pickle.loads(pickle.dumps(y.detach()))
    assert p.device_tensor_layout() == y.device_tensor_layout() and torch.equal(p.cpu(), y.detach().cpu())
    shallow = copy.copy(y.detach())
    assert shallow.device_tensor_layout() == y.device_tensor_layout() and torch.equal(shallow.cpu(), p.cpu())


def test_deepcopy_keeps_layout_values_and_sharing():
    x = _bit_tensors()
    layout = SpyreTensorLayout((6, 70), F16, [1, 0], pad_value=-3)
    y = x.to("spyre", device_layout=layout)
    copied = copy.deepcopy({"y": y, "view": y[1:, 3:]})
    z = copied["y"]
    assert z.device_tensor_layout() == layout and torch.equal(bits(z.cpu()), bits(x))
    assert torch.equal(bits(torch_layouts.device_memory(z)), bits(torch_layouts.device_memory(y)))
    assert z.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
    z.zero_()
    assert bool((copied["view"].cpu() == 0).all()) and torch.equal(bits(y.cpu()), bits(x))
    model = copy.deepcopy(_net().to("spyre"))
    assert all(p.device.type == "spyre" for p in model.parameters())
    model.eval()
    assert model(IMG.to("spyre")).shape == (2, 10)


# -- PyTorch's device-generic test machinery, instantiated for spyre ------------------------------------
OPS = [op for op in op_db if op.variant_test_name == "" and op.name in
       ("add", "mul", "sub", "sum", "matmul", "transpose", "view", "reshape", "permute", "softmax")]

# The device's matmul sums in another order than the CPU's: samples (values up to 9, k = 10)
# differ by rounding, each as far from the float64 result as the CPU's is.
ORDER_TOLERANCE = {"matmul": {"atol": 1e-4, "rtol": 1e-5}}


class TestSpyreDeviceGeneric(TestCase):
    """Every OpInfo sample run on spyre must match the same sample run on the CPU."""

    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_matches_cpu(self, device, dtype, op):
        self.assertEqual(torch.device(device).type, "spyre")
        samples = list(op.sample_inputs(device, dtype))
        self.assertGreater(len(samples), 0)
        for sample in samples:
            host = sample.transform(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t)
            got = op(sample.input, *sample.args, **sample.kwargs)
            want = op(host.input, *host.args, **host.kwargs)
            self.assertEqual(got.device.type, "spyre")
            self.assertEqual(got.cpu(), want, **ORDER_TOLERANCE.get(op.name, {}))

    @dtypes(torch.float16, torch.int32, torch.bool)
    def test_views_and_copies(self, device, dtype):
        x = torch.arange(24).view(4, 6).to(dtype)
        y = x.to(device)
        self.assertEqual(y.t().cpu(), x.t())
        self.assertEqual(y.view(2, 12)[1].cpu(), x.view(2, 12)[1])
        self.assertEqual(y.transpose(0, 1).contiguous().cpu(), x.t().contiguous())
        z = torch.zeros_like(y)
        z[1:3] = y[1:3]
        self.assertEqual(z.cpu(), torch.where(torch.arange(4).view(4, 1).sub(1.5).abs() < 1, x, torch.zeros_like(x)))

    def test_device_is_spyre(self, device):
        self.assertEqual(device, "spyre:0")
        self.assertEqual(torch.ones(2, device=device).device, torch.device("spyre", 0))


instantiate_device_type_tests(TestSpyreDeviceGeneric, globals(), only_for="spyre")


def test_device_generic_tests_were_instantiated_for_spyre():
    # The suffix is PRIVATEUSE1, or SPYRE once another module's instantiation has renamed PyTorch's base.
    cls = globals().get("TestSpyreDeviceGenericPRIVATEUSE1") or globals()["TestSpyreDeviceGenericSPYRE"]
    names = [n for n in dir(cls) if n.startswith("test_")]
    assert "test_device_is_spyre_spyre" in names
    expected = {f"test_matches_cpu_{op}_spyre_float32" for op in ("add", "mul", "sum", "matmul", "transpose", "view")}
    assert expected <= set(names)
    assert "TestSpyreDeviceGenericCPU" not in globals()


def test_printing_fake_spyre_tensors_formats_no_values():
    """Traces print fake spyre tensors (AOT autograd's structured logs do): no host copy is attempted."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.ones(3, device="spyre")
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = mode.from_tensor(x)
        assert repr(fake) == "FakeTensor(..., size=(3,), device='spyre:0')"
        assert "size=(2,)" in repr(torch.empty(2, device="spyre"))
    assert repr(x) == "tensor([1., 1., 1.], device='spyre:0')"
