"""PyTorch's OpInfo database on spyre: view ops, indexing, factory functions and ``view(dtype)``,
every sample run on the device and on the CPU with the same values (float64 and complex, which
are host-only, excluded). A representative list runs by default; the widened list is ``long``."""

from __future__ import annotations

import pytest
import torch

import torch_layouts  # noqa: F401 - registers spyre before common_device_type looks for backends
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

DEVICE_DTYPES = (torch.float32, torch.float16, torch.int32, torch.bool)
VIEWS = ("view", "reshape", "permute", "transpose", "t", "narrow", "select", "expand", "unsqueeze", "squeeze",
         "flatten", "unflatten", "movedim", "split", "chunk", "unbind", "diagonal", "as_strided", "view_as",
         "unfold", "expand_as", "tensor_split", "hsplit", "slice")
INDEXING = ("__getitem__", "index_select", "take", "masked_select", "gather", "scatter", "index_add",
            "index_copy", "index_fill", "index_put", "masked_fill", "take_along_dim", "where")
FACTORIES = ("arange", "linspace", "zeros", "ones", "full", "eye", "new_zeros", "new_ones", "new_full",
             "zeros_like", "ones_like", "full_like")
REPRESENTATIVE = ("view", "permute", "narrow", "select", "expand", "as_strided", "unfold", "__getitem__",
                  "index_select", "gather", "take", "masked_fill", "arange", "full", "zeros_like", "new_ones")


def _ops(names: tuple[str, ...]) -> list:
    return [op for op in op_db if op.variant_test_name == "" and op.name in names]


def _to_cpu(value: object, device: str) -> object:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, torch.device) and value.type == "spyre" or value == device:
        return "cpu"
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v, device) for v in value)
    return value


HOST_ONLY = (torch.float64, torch.complex64, torch.complex128, torch.complex32)


def _on_device(sample, device: str) -> bool:
    """Whether the sample's result belongs on spyre: a spyre input, or a factory told to use spyre."""
    values = [sample.input, *sample.args, *sample.kwargs.values()]
    if "device" in sample.kwargs:
        return torch.device(sample.kwargs["device"]).type == "spyre"
    return any(isinstance(v, torch.Tensor) and v.device.type == "spyre" for v in values)


def _check_sample(test: TestCase, op, sample, device: str) -> None:
    kwargs = {k: _to_cpu(v, device) for k, v in sample.kwargs.items()}
    host_args = [_to_cpu(a, device) for a in sample.args]
    want = op(_to_cpu(sample.input, device), *host_args, **kwargs)
    got = op(sample.input, *sample.args, **sample.kwargs)
    flat_got = got if isinstance(got, (list, tuple)) else [got]
    flat_want = want if isinstance(want, (list, tuple)) else [want]
    test.assertEqual(len(flat_got), len(flat_want))
    for g, w in zip(flat_got, flat_want):
        if isinstance(w, torch.Tensor):
            test.assertEqual(g.device.type, "spyre" if _on_device(sample, device) else "cpu")
            test.assertEqual(g.cpu(), w, exact_dtype=True)
        else:
            test.assertEqual(g, w)


def _run(test: TestCase, op, device: str, dtype: torch.dtype) -> None:
    samples = list(op.sample_inputs(device, dtype))
    test.assertGreater(len(samples), 0)
    for sample in samples:
        if sample.kwargs.get("dtype") not in HOST_ONLY:  # float64/complex results are host-only
            _check_sample(test, op, sample, device)


class TestSpyreOpInfo(TestCase):
    """OpInfo samples on spyre match the CPU."""

    @ops(_ops(REPRESENTATIVE), allowed_dtypes=(torch.float32, torch.int32))
    def test_representative(self, device, dtype, op):
        _run(self, op, device, dtype)

    @pytest.mark.long
    @ops(_ops(VIEWS + INDEXING + FACTORIES), allowed_dtypes=DEVICE_DTYPES)
    def test_widened(self, device, dtype, op):
        _run(self, op, device, dtype)

    @dtypes(torch.float32, torch.float16, torch.int16, torch.uint8, torch.int32)
    def test_view_dtype(self, device, dtype):
        """Every dtype of another element size views the device tensor as it views the CPU one."""
        x = torch.arange(4 * 96).reshape(4, 96).to(dtype)
        y = x.to(device)
        for target in (torch.uint8, torch.int16, torch.float16, torch.int32, torch.float32):
            want = x.view(target)
            self.assertEqual(y.view(target).cpu().view(torch.uint8), want.view(torch.uint8))
            self.assertEqual(y[1:3].view(target).cpu().view(torch.uint8), want[1:3].view(torch.uint8))


instantiate_device_type_tests(TestSpyreOpInfo, globals(), only_for="spyre")


def test_opinfo_tests_were_instantiated_for_spyre():
    # The suffix is PRIVATEUSE1, or SPYRE once another module's instantiation has renamed PyTorch's base.
    cls = globals().get("TestSpyreOpInfoPRIVATEUSE1") or globals()["TestSpyreOpInfoSPYRE"]
    names = set(dir(cls))
    assert {"test_representative_view_spyre_float32", "test_representative_arange_spyre_int32",
            "test_view_dtype_spyre_float16"} <= names
    assert not any("float64" in n or "complex" in n for n in names)
