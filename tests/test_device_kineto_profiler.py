"""Kineto device events for spyre (issue 14): ``torch.profiler.profile`` with
``ProfilerActivity.PrivateUse1`` reports device time for ops that run on spyre tensors.

* each innermost op on spyre tensors gets one ``spyre::<op>`` kernel on its device, linked to
  the op (``FunctionEvent.kernels``), lasting as long as the op (host marks); host ops and view ops get
  none; composite ops count their children's device time;
* the chrome trace shows them as kernels; without the PrivateUse1 activity there are none,
  and nothing is recorded after a session ends.
"""

from __future__ import annotations

import json

import torch
from torch.profiler import ProfilerActivity, profile

import torch_layouts  # noqa: F401  (registers spyre)

BOTH = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def spyre_kernels(prof: profile) -> dict[str, list]:
    return {e.name: e.kernels for e in prof.events() if e.kernels}


def test_device_ops_get_linked_kernels_and_host_and_view_ops_none():
    x = torch.randn(4, 8, device="spyre")
    host = torch.randn(4, 8)
    with profile(activities=BOTH) as prof:
        x.relu()
        host.sigmoid()
        x.t()
        x[1:]
        x.add(x)
    kernels = spyre_kernels(prof)
    assert set(kernels) == {"aten::relu", "aten::add"}, kernels
    for op, found in kernels.items():
        assert [(k.name, k.device) for k in found] == [(f"spyre::{op}", 0)]
    ops: dict = {}
    for e in prof.events():  # the outermost of each (the fallback runs the op again on host copies)
        ops.setdefault(e.name, e)
    relu = ops["aten::relu"]
    assert 0 < relu.device_time_total <= 1.1 * relu.cpu_time_total + 20  # the clocks differ by a few us
    assert ops["aten::sigmoid"].device_time_total == 0 and ops["aten::t"].device_time_total == 0
    averages = {a.key: a for a in prof.key_averages()}
    assert averages["aten::relu"].self_device_time_total > 0


def test_composite_ops_count_their_childrens_device_time():
    model = torch.nn.Linear(8, 8).to("spyre")
    x = torch.randn(4, 8, device="spyre")
    with profile(activities=BOTH) as prof:
        model(x)
    linear = next(e for e in prof.events() if e.name == "aten::linear")
    assert linear.device_time_total > 0 and linear.self_device_time_total == 0
    assert not linear.kernels


def test_chrome_trace_and_sessions(tmp_path):
    x = torch.randn(16, device="spyre")
    with profile(activities=BOTH) as prof:
        x.exp()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    assert any(e.get("name") == "spyre::aten::exp" and e.get("cat") == "kernel" for e in events)
    with profile(activities=[ProfilerActivity.CPU]) as cpu_only:
        x.exp()
    assert spyre_kernels(cpu_only) == {}
    with profile(activities=BOTH) as later:
        torch.ones(3).exp()  # ops between sessions and host ops leave nothing behind
    assert spyre_kernels(later) == {}
