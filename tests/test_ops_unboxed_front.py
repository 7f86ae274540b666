"""The hot schemas' fronts are registered unboxed (``csrc/unboxed_front.cpp``): a replayed call lends
its tensors to the replay without taking references. Each row runs a call three times on the same
device tensors (the first in Python, the later ones replayed) and checks, beside the CPU's values,
that every argument's reference counts (C++ and Python) are what they were before the call, that
an in-place or ``out=`` call returns the very tensor it wrote, a tuple-returning op each of its
results, and that the replayed calls ran no Python kernel."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch

from torch_layouts.ops import elementwise

F32 = torch.float32


def _layer_norm(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.ops.aten.native_layer_norm(x, x.shape[-1:], None, None, 1e-5)


def _softmax_backward(g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten._softmax_backward_data(g, y.softmax(-1), -1, F32)


# (id, function of the arguments, argument shapes, index of the argument it writes and returns, or
# None, whether the CPU's bits are expected). The third argument of out= rows is the out tensor.
CASES: list[tuple[str, Callable[..., object], list[tuple[int, ...]], int | None, bool]] = [
    ("add.Tensor", lambda a, b: a + b, [(6, 40), (6, 40)], None, True),
    ("add_.Tensor", lambda a, b: a.add_(b, alpha=0.5), [(6, 40), (6, 40)], 0, True),
    ("add.out", lambda a, b, out: torch.add(a, b, out=out), [(6, 40), (6, 40), (6, 40)], 2, True),
    ("mul.Scalar", lambda a: a * 0.5, [(5, 70)], None, True),
    ("mul_.Tensor same tensor", lambda a: a.mul_(a), [(3, 33)], 0, True),
    ("div.Tensor broadcast", lambda a, b: a / b, [(4, 6, 32), (32,)], None, True),
    ("sum.dim_IntList", lambda a: a.sum(-1), [(8, 64)], None, False),
    ("mean.dim", lambda a: a.mean(0), [(8, 64)], None, False),
    ("mm", lambda a, b: a @ b, [(12, 64), (64, 40)], None, False),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b), [(40,), (12, 64), (64, 40)], None, False),
    ("clone", lambda a: a.clone(), [(5, 70)], None, True),
    ("_softmax", lambda a: torch.softmax(a, -1), [(6, 40)], None, False),
    ("_softmax_backward_data", _softmax_backward, [(6, 40), (6, 40)], None, False),
    ("native_layer_norm (a tuple)", _layer_norm, [(4, 6, 64)], None, False),
    ("gelu", lambda a: torch.nn.functional.gelu(a), [(6, 40)], None, False),  # the CPU's tail rounds apart
    ("fill_.Scalar", lambda a: a.fill_(2.5), [(5, 70)], 0, True),
    ("zero_", lambda a: a.zero_(), [(5, 70)], 0, True),
]


@contextmanager
def python_kernel_calls() -> Iterator[list[str]]:
    """The functions of torch_layouts.ops entered while the block runs (on this thread)."""
    entered: list[str] = []

    def profile(frame, event, _arg):
        if event == "call" and frame.f_globals.get("__name__", "").startswith("torch_layouts.ops"):
            entered.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        yield entered
    finally:
        sys.setprofile(None)


def _counts(tensors: list[torch.Tensor]) -> list[tuple[int, int]]:
    return [(t._use_count(), sys.getrefcount(t)) for t in tensors]


def _as_tuple(result: object) -> tuple[torch.Tensor, ...]:
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("_, fn, shapes, written, exact", CASES, ids=[c[0] for c in CASES])
def test_unboxed_fronts_lend_their_arguments(_, fn, shapes, written, exact):
    elementwise.forget_recipes()
    gen = torch.Generator().manual_seed(len(shapes))
    cpu = [torch.randn(s, generator=gen) for s in shapes]
    dev = [t.to("spyre") for t in cpu]
    for call in range(3):
        before = _counts(dev)
        if written is not None:  # `got` will be that tensor: one more Python reference
            before[written] = (before[written][0], before[written][1] + 1)
        with python_kernel_calls() as entered:
            got = fn(*dev)
        assert _counts(dev) == before, f"call {call}: reference counts of the arguments changed"
        expected = fn(*cpu)
        if written is not None:
            assert got is dev[written], f"call {call}: the op returned another tensor than the one it wrote"
        for g, e in zip(_as_tuple(got), _as_tuple(expected), strict=True):
            assert g.device.type == "spyre" and g.shape == e.shape and g.dtype == e.dtype
            if exact:
                assert torch.equal(g.cpu(), e), f"call {call}"
            else:
                torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-5, msg=f"call {call}")
        for d, c in zip(dev, cpu, strict=True):  # what each call wrote (or left) in its arguments
            assert torch.equal(d.cpu(), c), f"call {call}: an argument differs from the CPU's"
        if call == 2:
            assert entered == [], f"the replayed call ran Python kernels: {sorted(set(entered))}"
        del got, expected


def test_a_lent_tensor_outlives_its_call_only_through_its_own_references():
    """Results made by replays hold their own references: dropping every argument after a replayed
    call leaves the results whole (no reference was given back that was not taken)."""
    elementwise.forget_recipes()
    kept = []
    for seed in range(4):
        a, b = torch.randn(6, 40, generator=torch.Generator().manual_seed(seed)), torch.randn(6, 40)
        da, db = a.to("spyre"), b.to("spyre")
        kept.append((da + db, da.clone(), a + b))
        del da, db
    for s, c, expected in kept:
        assert torch.equal(s.cpu(), expected) and s._use_count() == 1 and c._use_count() == 1


OOM_SCRIPT = """
import sys, torch, torch_layouts
a, b = torch.randn(64, 1024), torch.randn(64, 1024)  # 256 KiB each
da, db = a.to("spyre"), b.to("spyre")
for _ in range(2):  # the first calls in Python, the second ones replayed
    assert torch.equal((da + db).cpu(), a + b)
    torch.testing.assert_close(torch.softmax(da, -1).cpu(), torch.softmax(a, -1))
assert torch_layouts._C._kept_recipes() >= 2
counts = [(t._use_count(), sys.getrefcount(t)) for t in (da, db)]
filler = torch.empty(96 * 1024, device="spyre")  # 384 KiB: what is left cannot hold a result
for fn in (lambda: da + db, lambda: torch.softmax(da, -1)):
    try:
        fn()
    except torch.OutOfMemoryError:
        pass
    else:
        raise AssertionError("no OutOfMemoryError")
assert [(t._use_count(), sys.getrefcount(t)) for t in (da, db)] == counts, "a failed replay kept or dropped a reference"
del filler
assert torch.equal((da + db).cpu(), a + b) and torch.equal(da.cpu(), a) and torch.equal(db.cpu(), b)
print("ok")
"""


def test_a_replay_that_raises_gives_its_lent_arguments_back():
    """A replay that fails (its result does not fit in device memory) raises OutOfMemoryError with
    the arguments' reference counts as they were; the next call, with memory freed, computes."""
    import os
    import subprocess
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", OOM_SCRIPT], cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(repo), "TORCH_LAYOUTS_DEVICE_MEMORY": "1MiB"})
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stdout + done.stderr[-3000:]


def test_threads_replaying_on_shared_arguments_leave_their_counts():
    """Four threads replaying calls on the same lent tensors at once: every result is the CPU's and
    the shared arguments' reference counts end as they began."""
    from concurrent.futures import ThreadPoolExecutor
    elementwise.forget_recipes()
    a, b = torch.randn(16, 96), torch.randn(16, 96)
    da, db = a.to("spyre"), b.to("spyre")
    (da + db), torch.softmax(da, -1)  # kept: the threads replay them
    before = _counts([da, db])

    def work(_: int) -> bool:
        return all(torch.equal((da + db).cpu(), a + b) and torch.equal((da * db).cpu(), a * b) for _ in range(50))
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(8)))
    assert _counts([da, db]) == before


def test_boxed_calls_reach_the_unboxed_fronts():
    """A boxed call of an op at the device's key (below autograd, as a boxed fallback or the Python
    dispatcher makes it) enters the unboxed front through PyTorch's unboxing wrapper: the same
    values, the written tensor returned, reference counts unchanged."""
    elementwise.forget_recipes()
    add_ = torch._C._dispatch_find_schema_or_throw("aten::add_", "Tensor")
    layer_norm = torch._C._dispatch_find_schema_or_throw("aten::native_layer_norm", "")
    a, b = torch.randn(4, 40), torch.randn(4, 40)
    da, db = a.to("spyre"), b.to("spyre")
    for call in range(3):
        before = _counts([da, db])
        before[0] = (before[0][0], before[0][1] + 1)  # `got` is da
        with torch._C._AutoDispatchBelowADInplaceOrView():
            got = torch._C._dispatch_call_boxed(add_, da, db, alpha=0.5)
        assert got is da and _counts([da, db]) == before, f"call {call}"
        a.add_(b, alpha=0.5)
        assert torch.equal(da.cpu(), a), f"call {call}"
        del got
        with torch._C._AutoDispatchBelowADInplaceOrView():
            out = torch._C._dispatch_call_boxed(layer_norm, db, [40], None, None, 1e-5)
        for o, e in zip(out, torch.native_layer_norm(b, [40], None, None, 1e-5), strict=True):
            torch.testing.assert_close(o.cpu(), e, rtol=1e-5, atol=1e-5)
