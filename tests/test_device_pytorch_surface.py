"""What PyTorch code expects of a backend, on spyre: RNNs, SDPA's backend path, shallow-copy
compatibility, ``torch.spyre`` device queries, pinned memory, process sharing, device-index and
quantized errors, and a default capacity the host can back (OutOfMemoryError before the OOM killer)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from test_reliability_roundtrip import bits_equal, cases, move, scaled

import torch_layouts
from torch_layouts import SpyreTensorLayout, ops


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "TORCH_LAYOUTS_DEVICE_MEMORY"}
    environment.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environment, capture_output=True,
                          text=True, timeout=180)


# -- nn.LSTM / nn.GRU ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.LSTMCell, torch.nn.GRUCell])
@pytest.mark.parametrize("bias", [True, False])
def test_rnn_forward_and_backward_match_cpu(cls, bias):
    torch.manual_seed(0)
    recurrent = cls in (torch.nn.LSTM, torch.nn.GRU)
    host = cls(4, 6, bias=bias, **({"num_layers": 2, "batch_first": True} if recurrent else {}))
    device = cls(4, 6, bias=bias, **({"num_layers": 2, "batch_first": True} if recurrent else {}))
    device.load_state_dict(host.state_dict())
    device.to("spyre")
    x = torch.randn((3, 5, 4) if recurrent else (3, 4), requires_grad=True)
    xd = x.detach().to("spyre").requires_grad_()
    out, out_d = host(x), device(xd)
    first = (lambda o: o[0]) if cls is not torch.nn.GRUCell else (lambda o: o)
    first(out).sum().backward()
    first(out_d).sum().backward()
    torch.testing.assert_close(first(out_d).cpu(), first(out), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, atol=1e-5, rtol=1e-5)
    for p, pd in zip(host.parameters(), device.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), p.grad, atol=1e-5, rtol=1e-5)


# -- scaled_dot_product_attention ------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["plain", "causal", "float mask", "bool mask", "scale"])
def test_sdpa_takes_the_overrideable_path(case):
    torch.manual_seed(1)
    q = torch.randn(2, 3, 5, 8, requires_grad=True)
    k, v = torch.randn(2, 3, 7, 8, requires_grad=True), torch.randn(2, 3, 7, 4, requires_grad=True)
    if case == "causal":
        k, v = torch.randn(2, 3, 5, 8, requires_grad=True), torch.randn(2, 3, 5, 4, requires_grad=True)
    kwargs = {"causal": {"is_causal": True}, "float mask": {"attn_mask": torch.randn(5, 7)},
              "bool mask": {"attn_mask": torch.rand(5, 7) > 0.3}, "scale": {"scale": 0.3}}.get(case, {})
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    expected.sum().backward()
    qd, kd, vd = (t.detach().to("spyre").requires_grad_() for t in (q, k, v))
    dkwargs = {name: value.to("spyre") if isinstance(value, torch.Tensor) else value for name, value in kwargs.items()}
    ops.reset_stats()
    got = F.scaled_dot_product_attention(qd, kd, vd, **dkwargs)
    got.sum().backward()
    calls = ops.stats()["kernel_calls"]
    assert calls.get("aten::_scaled_dot_product_fused_attention_overrideable") == 1
    assert calls.get("aten::_scaled_dot_product_fused_attention_overrideable_backward") == 1
    torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)
    for device_tensor, host_tensor in ((qd, q), (kd, k), (vd, v)):
        torch.testing.assert_close(device_tensor.grad.cpu(), host_tensor.grad, atol=1e-5, rtol=1e-5)


def test_sdpa_with_dropout_takes_the_math_path():
    q = torch.randn(1, 2, 4, 8).to("spyre")
    assert torch._fused_sdp_choice(q, q, q, dropout_p=0.5) == 0
    assert torch._fused_sdp_choice(q, q, q) == 4
    assert F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).shape == (1, 2, 4, 8)


# -- shallow copies ---------------------------------------------------------------------------------------
def test_shallow_copy_compatibility_like_cuda():
    cpu, spyre = torch.zeros(2), torch.zeros(2, device="spyre")
    assert torch._has_compatible_shallow_copy_type(cpu, spyre)
    assert torch._has_compatible_shallow_copy_type(spyre, cpu)
    assert not torch._has_compatible_shallow_copy_type(spyre, torch.zeros(2).to_sparse())
    model = torch.nn.Linear(3, 2)
    weight = model.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to("spyre")
    assert model.weight is weight and weight.device.type == "spyre"  # optimizers keep their parameters
    model(torch.ones(1, 3).to("spyre")).sum().backward()
    before = weight.detach().cpu().clone()
    optimizer.step()
    assert torch.allclose(weight.detach().cpu(), before - 0.1 * weight.grad.cpu())


# -- torch.spyre queries ------------------------------------------------------------------------------------
def test_init_properties_and_capability():
    assert torch.spyre.init() is None and torch.spyre.is_initialized()
    props = torch.spyre.get_device_properties("spyre:0")
    assert props.total_memory == torch.spyre.mem_get_info(0)[1] and props.name.startswith("spyre")
    assert (props.major, props.minor) == torch.spyre.get_device_capability() == (1, 0)
    supported = torch.accelerator.get_device_capability("spyre")["supported_dtypes"]
    assert torch.float32 in supported and torch.float64 not in supported and torch.complex64 not in supported
    with pytest.raises(RuntimeError, match="The device index is out of range"):
        torch.spyre.get_device_properties(7)


@pytest.mark.parametrize("make", [lambda: torch.empty(2, device="spyre:7"), lambda: torch.ones(2).to("spyre:7"),
                                  lambda: torch.spyre.set_device(7), lambda: torch.Stream("spyre:7")])
def test_out_of_range_device_index(make):
    with pytest.raises(RuntimeError, match=r"The device index is out of range\. It must be in \[0, 1\), but got "
                                           r"spyre:7"):
        make()


def test_pin_memory_is_pinned():
    host = torch.arange(6.0)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and not host.is_pinned() and torch.equal(pinned, host)
    assert torch.empty(4, pin_memory=True).is_pinned()
    assert pinned.to("spyre", non_blocking=True).cpu().tolist() == host.tolist()


def test_names_behave_as_on_cpu():
    """This PyTorch has no named tensors: ``names=`` fails on spyre exactly as on the CPU."""
    def error(device: str) -> tuple[type, str]:
        try:
            torch.empty((2, 3), names=("a", "b"), device=device)
        except Exception as e:  # noqa: BLE001 - compared with the CPU's
            return type(e), str(e)
        return type(None), ""
    assert error("spyre") == error("cpu")


def test_quantized_tensors_are_refused_clearly():
    x = torch.randn(4).to("spyre")
    with pytest.raises(NotImplementedError, match=r"quantize_per_tensor on spyre: spyre has no quantized tensors"):
        torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
    q = torch.quantize_per_tensor(x.cpu(), 0.1, 0, torch.qint8)
    assert torch.equal(q.dequantize().to("spyre").cpu(), q.dequantize())


def test_multiprocessing_sends_spyre_tensors_by_value(tmp_path):
    script = tmp_path / "share.py"  # spawned children import the parent's main module from a file
    script.write_text(textwrap.dedent("""
        import torch, torch_layouts
        import torch.multiprocessing as mp

        def child(inbox, outbox):
            t = inbox.get(timeout=60)
            outbox.put((str(t.device), t.cpu(), str(t.device_tensor_layout())))
            inbox.get(timeout=60)  # the CPU tensor's shared file is handed over while this process lives

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            inbox, outbox = ctx.Queue(), ctx.Queue()
            worker = ctx.Process(target=child, args=(inbox, outbox))
            worker.start()
            t = torch.arange(6.0).reshape(2, 3).to("spyre")
            inbox.put(t[:, 1:])
            device, values, layout = outbox.get(timeout=60)
            inbox.put("received")
            worker.join(60)
            assert device == "spyre:0" and values.tolist() == [[1.0, 2.0], [4.0, 5.0]]
            assert layout == str(t.device_tensor_layout()) and worker.exitcode == 0
            print("ok")
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]


# -- capacity the host can back ------------------------------------------------------------------------------
def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


def test_default_capacity_fits_host_memory():
    result = run_python("""
        import torch, torch_layouts
        print(sum(torch.spyre.mem_get_info(i)[1] for i in range(torch.spyre.device_count())))
    """, TORCH_LAYOUTS_DEVICE_COUNT="3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert 0 < int(result.stdout.split()[-1]) <= mem_available()


def test_oom_error_before_the_host_runs_out():
    """A block the host cannot back raises torch.OutOfMemoryError at once, even under a huge
    TORCH_LAYOUTS_DEVICE_MEMORY, and the device stays usable."""
    result = run_python(f"""
        import torch, torch_layouts
        try:
            torch.empty({2 * mem_available()}, dtype=torch.uint8, device="spyre")
        except torch.OutOfMemoryError as e:
            assert "host" in str(e), e
            assert torch.spyre.memory_allocated() == 0
            print(torch.ones(3, device="spyre").sum().item())
    """, TORCH_LAYOUTS_DEVICE_MEMORY="1000TiB")
    assert result.returncode == 0 and result.stdout.strip().endswith("3.0"), result.stderr[-2000:]


STORAGE_CASES = [
    ("fp32 default, padded", torch.arange(6.0).reshape(2, 3), None),
    ("fp16 dim_order [1, 0]", torch.randn(5, 70).half(), SpyreTensorLayout((5, 70), torch.float16, [1, 0])),
    ("int8 sparse", torch.arange(12, dtype=torch.int8).reshape(3, 4), SpyreTensorLayout((3, 4), torch.int8, [0, 1, -1])),
    ("bool 1-D", torch.tensor([True, False, True]), None),
]


@pytest.mark.parametrize("name, x, layout", STORAGE_CASES, ids=[c[0] for c in STORAGE_CASES])
def test_untyped_storage_copies_are_the_raw_device_buffer(name: str, x: torch.Tensor, layout: object) -> None:
    """UntypedStorage.cpu()/clone()/copy_ move the device buffer's bytes (device order, padding included)."""
    y = x.to("spyre") if layout is None else x.to("spyre", device_layout=layout)
    storage = y.untyped_storage()
    host = storage.cpu()
    assert host.device.type == "cpu" and host.nbytes() == storage.nbytes()
    raw = torch_layouts.device_memory(y).view(torch.uint8)
    assert bytes(host) == bytes(raw.numpy())
    assert bytes(storage.clone().cpu()) == bytes(host)
    target = y.new_empty(y.shape, device="spyre", device_layout=y.device_tensor_layout())
    target.untyped_storage().copy_(host)
    assert torch.equal(target.cpu(), x)


@scaled(40)
@given(cases())
def test_untyped_storage_round_trip_is_bit_exact_for_random_layouts(case: tuple[torch.Tensor, object]) -> None:
    """For any family, shape and dtype: the storage's host copy starts with the device buffer byte for byte,
    and writing it into a fresh buffer of the same layout reads back the CPU tensor bit for bit."""
    x, spec = case
    y = move(x, spec)
    host = y.untyped_storage().cpu()
    memory = bytes(torch_layouts.device_memory(y).view(torch.uint8).numpy())
    # the storage is the layout's buffer, longer only where the host strides reach further
    assert host.nbytes() >= len(memory) and bytes(host)[:len(memory)] == memory
    # a fresh buffer bound as y's is (a layout of host strides binds only to the strides it names)
    bound = torch_layouts._C._bound_layout_of(y)
    target = y.new_empty_strided(bound.base_size, bound.base_stride, device_layout=y.device_tensor_layout())
    target = target.as_strided(y.shape, y.stride(), y.storage_offset())
    target.untyped_storage().copy_(host)
    assert bits_equal(target.cpu(), x)
