"""Streams and events on spyre behave as CUDA documents (work itself runs synchronously):
distinct ids, a per-thread current stream switched by ``with``, waits, queries, timed events."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch


def test_stream_ids_and_defaults():
    default = torch.spyre.current_stream()
    assert default.stream_id == 0 and default == torch.spyre.default_stream()
    made = [torch.Stream(device="spyre") for _ in range(3)] + [torch.spyre.Stream() for _ in range(2)]
    ids = [s.stream_id for s in made]
    assert len(set(ids)) == len(ids) and 0 not in ids
    assert all(s.device == torch.device("spyre", 0) and s.device_index == 0 for s in made)


def test_with_stream_switches_and_restores():
    s = torch.spyre.Stream()
    with s:
        assert torch.accelerator.current_stream() == s
        assert torch.spyre.current_stream() == s
    assert torch.spyre.current_stream().stream_id == 0
    with torch.spyre.stream(s):
        assert torch.spyre.current_stream() == s
    assert torch.spyre.current_stream().stream_id == 0
    with torch.spyre.stream(None):
        assert torch.spyre.current_stream().stream_id == 0


def test_current_stream_is_per_thread():
    s = torch.spyre.Stream()
    seen = []
    with s:
        worker = threading.Thread(target=lambda: seen.append(torch.spyre.current_stream().stream_id))
        worker.start()
        worker.join()
    assert seen == [0]


def test_ordering_waits_and_queries():
    """Work queued on a stream is complete when observed from another: wait_stream, wait_event,
    query and synchronize all agree."""
    s1, s2 = torch.spyre.Stream(), torch.spyre.Stream()
    x = torch.arange(6.0).to("spyre")
    with s1:
        y = x * 2
    s2.wait_stream(s1)
    with s2:
        z = y + 1
    event = s2.record_event()
    assert event.query() and s1.query() and s2.query()
    torch.spyre.default_stream().wait_event(event)
    event.synchronize()
    s1.synchronize()
    torch.spyre.synchronize()
    assert z.cpu().tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]


def test_elapsed_time():
    start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
    start.record()
    (torch.randn(64, 64).to("spyre") @ torch.randn(64, 64).to("spyre")).cpu()
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float) and elapsed > 0
    assert end.elapsed_time(start) == pytest.approx(-elapsed)
    untimed = torch.spyre.Event()
    untimed.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):
        start.elapsed_time(untimed)
    with pytest.raises((RuntimeError, ValueError), match="must be recorded"):
        torch.spyre.Event(enable_timing=True).elapsed_time(end)


def test_streams_on_a_second_device():
    """``with torch.Stream("spyre:1")`` makes that device and stream current, then restores both."""
    code = """
import torch, torch_layouts
s = torch.Stream("spyre:1")
assert s.device_index == 1 and s.stream_id != 0
with s:
    assert torch.spyre.current_device() == 1
    assert torch.accelerator.current_stream() == s
    assert torch.ones(2, device="spyre").device.index == 1
assert torch.spyre.current_device() == 0 and torch.spyre.current_stream(1).stream_id == 0
print("ok")
"""
    env = dict(os.environ, TORCH_LAYOUTS_DEVICE_COUNT="2")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]
