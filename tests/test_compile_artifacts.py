"""explain_compile's report: DCIs and SuperDSCs checked against the layouts' DMA programs
and device memory, str/to_json, and the dump directory."""

from __future__ import annotations

import itertools
import json
import math

import torch

import torch_layouts
from torch_layouts import SpyreTensorLayout
from torch_layouts.compile.artifacts import CORES


def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a + b.t()).relu() @ b


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(96, 80, generator=g).to(torch.float16)
    b = torch.randn(80, 96, generator=g).to(torch.float16)
    return [a.to("spyre"), b.to("spyre", device_layout=SpyreTensorLayout((80, 96), torch.float16, [1, 0]))]


def _run_dci(dci: dict, source: torch.Tensor, dst_numel: int, fill: float = 0) -> torch.Tensor:
    """Execute a DCI's pieces (innermost-first dcsi entries) as strided copies."""
    dst = torch.full((dst_numel,), fill, dtype=source.dtype)
    for piece in dci["pieces"]:
        outer_first = list(reversed(piece))
        sizes = [e["size_"] for e in outer_first]
        src_off = sum(e["offset_src_"] for e in piece)
        dst_off = sum(e["offset_dst_"] for e in piece)
        src_view = source.as_strided(sizes, [e["stride_src_"] for e in outer_first], src_off)
        dst.as_strided(sizes, [e["stride_dst_"] for e in outer_first], dst_off).copy_(src_view)
    return dst


def test_input_dcis_reproduce_device_memory_and_match_dma_programs() -> None:
    inputs = _inputs()
    r = torch_layouts.explain_compile(fn, *inputs)
    h2d = [d for d in r.dcis if d["direction"] == "h2d"]
    assert [d["name"] for d in h2d] == ["arg0_1", "arg1_1"]
    for dci, x in zip(h2d, inputs):
        layout = x.device_tensor_layout()
        assert r.layouts[dci["name"]] == layout
        program = torch_layouts.dma_program(layout, tuple(x.shape))
        assert len(dci["pieces"]) == len(program.nests)
        for piece, nest in zip(dci["pieces"], program.nests):
            assert [e["size_"] for e in piece] == list(reversed(nest.ranges))
            assert [e["stride_dst_"] for e in piece] == list(reversed(nest.device_strides))
            assert [e["stride_src_"] for e in piece] == list(reversed(nest.host_strides))
        memory = _run_dci(dci, x.cpu().contiguous().view(-1), math.prod(layout.device_size))
        assert torch.equal(memory, torch_layouts.device_memory(x))


def test_output_dci_reads_the_compiled_output_back() -> None:
    inputs = _inputs()
    r = torch_layouts.explain_compile(fn, *inputs)
    (d2h,) = [d for d in r.dcis if d["direction"] == "d2h"]
    out = torch.compile(fn, backend="spyre")(*inputs)
    assert out.device_tensor_layout() == r.layouts[d2h["name"]]  # the plan predicted the real layout
    host = _run_dci(d2h, torch_layouts.device_memory(out), out.numel())
    assert torch.equal(host.view(out.shape), out.cpu())


def test_sdscs_describe_each_kernel_and_divide_work_over_the_cores() -> None:
    r = torch_layouts.explain_compile(fn, *_inputs())
    ops = [s["op"] for s in r.sdscs]
    assert ops == ["restickify", "aten.add.Tensor", "aten.relu.default", "aten.mm.default"]
    for s in r.sdscs:
        for lds in s["inputs"] + s["outputs"]:
            if lds["dsName_"] in r.layouts and s["op"] != "restickify":
                layout = r.layouts[lds["dsName_"]]
                assert lds["device_size"] == list(layout.device_size)
                assert lds["stride_map"] == list(layout.stride_map)
                assert lds["dataFormat_"] == "SEN169_FP16"
        wd = s["work_division"]
        splits = list(wd["numWkSlicesPerDim_"].values())
        assert math.prod(splits) == wd["numCoresUsed_"] <= CORES
        dims = s["outputs"][0]["device_size"][:-1]
        assert all(n % k == 0 for n, k in zip(dims, splits))
        slots = {tuple(v.values()) for v in wd["coreIdToWkSlice_"].values()}
        assert slots == set(itertools.product(*(range(k) for k in splits)))


def test_report_text_json_and_dump(tmp_path, monkeypatch) -> None:
    inputs = _inputs()
    r = torch_layouts.explain_compile(fn, *inputs)
    text = str(r)
    assert "[spyre compile] inference graph" in text and "aten.mm.default" in text and "optimal" in text
    data = json.loads(r.to_json())
    assert data["cost_bytes"] == r.cost_bytes and data["optimal"] is True
    assert len(data["dcis"]) == len(r.dcis) and len(data["sdscs"]) == len(r.sdscs)
    assert set(data["layouts"]) == set(r.layouts)
    monkeypatch.setenv("TORCH_LAYOUTS_COMPILE_DUMP", str(tmp_path))
    torch._dynamo.reset()
    torch.compile(fn, backend="spyre")(*inputs)
    (path,) = tmp_path.iterdir()
    dumped = json.loads(path.read_text())
    # Dynamo may order the graph's inputs differently from export: compare the layouts, not names.
    assert dumped["cost_bytes"] == r.cost_bytes
    assert sorted(dumped["layouts"].values()) == sorted(data["layouts"].values())


def test_training_report_has_forward_and_backward_graphs() -> None:
    lin = torch.nn.Linear(64, 64, dtype=torch.float16).to("spyre")
    x = torch.randn(8, 64, dtype=torch.float16).to("spyre")
    r = torch_layouts.explain_compile(lin, x)
    assert [p.kind for p in r.plans] == ["forward", "backward"]
    assert any(k.startswith("backward.") for k in r.layouts)
    assert "[spyre compile] backward graph" in str(r)
