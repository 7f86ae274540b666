"""Reliability (issue 10.4): eight threads moving, relayouting and computing at once.

Each thread works on its own tensors for a few seconds: H2D into a random family's
layout, D2H, device-to-device relayouts, views (gathers and scatters), and ops through
the CPU fallback (or device kernels where they exist), checking every result bit for
bit against the host. Afterwards no thread has failed or hung, and the allocator's
statistics are back where they started (every block freed, allocated == freed).
"""

from __future__ import annotations

import gc
import random
import threading
import time
import traceback

import pytest
import torch
from conftest import as_bits, random_bits

from torch_layouts import DeviceLayout, SpyreTensorLayout, htp, mace, tensorrt

THREADS = 8


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(as_bits(a), as_bits(b))


# (shape, dtype, layouts to move through); every layout holds the shape and dtype.
CASES = [
    ((1, 5, 9, 40), torch.float16, [None, htp.R4CroutonLayout, tensorrt.TensorFormat.kHWC8,
                                    mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL),
                                    SpyreTensorLayout((1, 5, 9, 40), torch.float16, [3, 0, 1, 2])]),
    ((2, 3, 7, 5), torch.float32, [None, htp.R4Depth32MemoryLayout, tensorrt.TensorFormat.kCHW32,
                                   mace.ImageLayout(mace.BufferType.IN_OUT_WIDTH), mace.CpuLayout.CPU_NCHW]),
    ((33, 70), torch.bfloat16, [None, SpyreTensorLayout((33, 70), torch.bfloat16, [1, 0], pad_value=-3),
                                htp.FlatMemoryLayout(2), DeviceLayout([3, 70, 12], [840, 1, 70], torch.bfloat16)]),
    ((4, 6, 130), torch.int8, [None, SpyreTensorLayout((4, 6, 130), torch.int8, [0, 1, 2, -1]),
                               tensorrt.TensorFormat.kCHW4, htp.ChunkedMemoryLayout(3, 0, 0, 2, 0, 1, 0, 2, 64)]),
    ((5, 17), torch.int32, [None, tensorrt.TensorFormat.kLINEAR, htp.FlatMemoryLayout(2),
                            SpyreTensorLayout((5, 17), torch.int32, [1, 0])]),
    ((3, 65), torch.bool, [None, SpyreTensorLayout((3, 65), torch.bool, [1, 0], pad_value=True),
                           htp.ChunkedMemoryLayout(2, 1, 0, 0, 0, 1, 8)]),
]


def move(x: torch.Tensor, spec: object) -> torch.Tensor:
    return x.to("spyre") if spec is None else x.to("spyre", device_layout=spec)


def work(seed: int, deadline: float, done: list[int]) -> None:
    """One thread's loop: every step checks its result against the host."""
    rng = random.Random(seed)
    steps = 0
    while time.monotonic() < deadline:
        shape, dtype, specs = rng.choice(CASES)
        x = random_bits(torch.Size(shape).numel(), dtype, rng.randrange(2**31)).view(shape)
        y = move(x, rng.choice(specs))
        assert bits_equal(y.cpu(), x), "H2D/D2H"
        z = y.to("spyre", device_layout=rng.choice([s for s in specs if s is not None]))
        assert bits_equal(z.cpu(), x), "relayout"
        d = rng.randrange(len(shape))
        assert bits_equal(z.narrow(d, 1, shape[d] - 1).cpu(), x.narrow(d, 1, shape[d] - 1)), "view gather"
        patch = random_bits(x.select(d, 0).numel(), dtype, rng.randrange(2**31)).view(x.select(d, 0).shape)
        z.select(d, 0).copy_(patch)
        expected = x.clone()
        expected.select(d, 0).copy_(patch)
        assert bits_equal(z.cpu(), expected), "view scatter"
        if dtype.is_floating_point:
            values = torch.randn(shape).to(dtype)
            w = move(values, rng.choice(specs))
            assert torch.equal((w * 2 + 1).cpu(), values * 2 + 1), "elementwise op"
            # a device reduction may add in its layout's order: compare with a tolerance
            torch.testing.assert_close(w.sum(-1).cpu().float(), values.float().sum(-1), rtol=2e-2, atol=0.1)
        del x, y, z, patch
        steps += 1
    done.append(steps)


def run_threads(seconds: float) -> None:
    gc.collect()
    start = torch.spyre.memory_stats()
    deadline = time.monotonic() + seconds
    errors: list[str] = []
    done: list[int] = []

    def target(seed: int) -> None:
        try:
            work(seed, deadline, done)
        except BaseException:  # report any failure, including assertion errors, to the main thread
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=target, args=(seed,), daemon=True) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 120)
    assert not any(t.is_alive() for t in threads), "a thread hung (deadlock?)"
    assert not errors, "\n".join(errors)
    assert len(done) == THREADS and min(done) > 0, f"steps per thread: {done}"
    gc.collect()
    end = torch.spyre.memory_stats()
    assert end["allocated_bytes.all.current"] == start["allocated_bytes.all.current"]
    assert end["allocation.all.current"] == start["allocation.all.current"]
    assert (end["allocated_bytes.all.allocated"] - start["allocated_bytes.all.allocated"]
            == end["allocated_bytes.all.freed"] - start["allocated_bytes.all.freed"])
    assert end["allocation.all.allocated"] - start["allocation.all.allocated"] == (
        end["allocation.all.freed"] - start["allocation.all.freed"])


def test_threads_move_relayout_and_compute() -> None:
    run_threads(3.0)


@pytest.mark.long
def test_threads_long() -> None:
    run_threads(30.0)
