"""The spyre generator is Philox-style like CUDA's (issue 14): its state is (seed, offset).

* ``get_state()`` is 16 bytes, ``state.view(torch.int64) == [seed, offset]`` as on CUDA;
  ``set_state`` round-trips; a wrong size or an offset not a multiple of 4 raises.
* ``manual_seed`` resets the offset to 0; each random op moves it by the values it produced
  rounded up to a multiple of 4; ``set_offset`` moves the stream: the same (seed, offset)
  gives the same draws, from any generator, whatever came before.
* ``torch.spyre.seed``/``seed_all``/``initial_seed``, ``fork_rng`` and dropout draw from it.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts  # noqa: F401  (registers spyre)

DRAWS = [
    ("randn", lambda g: torch.randn(37, device="spyre", generator=g)),
    ("rand", lambda g: torch.rand(5, 6, device="spyre", generator=g)),
    ("uniform_", lambda g: torch.empty(40, device="spyre").uniform_(-2, 3, generator=g)),
    ("normal_", lambda g: torch.empty(9, device="spyre").normal_(generator=g)),
    ("randint", lambda g: torch.randint(0, 1000, (17,), device="spyre", dtype=torch.int32, generator=g)),
    ("randperm", lambda g: torch.randperm(23, device="spyre", generator=g)),
    ("bernoulli", lambda g: torch.bernoulli(torch.full((30,), 0.5, device="spyre"), generator=g)),
    ("multinomial", lambda g: torch.multinomial(torch.ones(12, device="spyre"), 6, generator=g)),
]


def seed_offset(g: torch.Generator) -> list[int]:
    return g.get_state().view(torch.int64).tolist()


@pytest.mark.parametrize("name, draw", DRAWS, ids=[d[0] for d in DRAWS])
def test_offset_counts_values_and_replays_draws(name, draw):
    g = torch.Generator(device="spyre")
    g.manual_seed(1234)
    assert g.get_offset() == 0 and seed_offset(g) == [1234, 0]
    first = draw(g).cpu()
    step = g.get_offset()
    assert step == (first.numel() + 3) // 4 * 4
    second = draw(g).cpu()
    assert g.get_offset() == 2 * step and not torch.equal(first, second)
    g.set_offset(step)  # back to the second draw
    assert torch.equal(draw(g).cpu(), second)
    g.manual_seed(1234)
    assert torch.equal(draw(g).cpu(), first)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), quarter=st.integers(0, 2**40), noise=st.integers(0, 3))
def test_same_seed_and_offset_same_draws(seed, quarter, noise):
    a, b = torch.Generator(device="spyre"), torch.Generator(device="spyre")
    a.manual_seed(seed)
    a.set_offset(4 * quarter)
    b.manual_seed(seed ^ 1)
    for _ in range(noise):  # whatever b drew before, its state decides
        torch.rand(7, device="spyre", generator=b)
    b.set_state(a.get_state())
    assert seed_offset(b) == [seed - 2**64 if seed >= 2**63 else seed, 4 * quarter]
    assert b.initial_seed() == seed and b.get_offset() == 4 * quarter
    x = torch.randn(11, device="spyre", generator=a).cpu()
    assert torch.equal(torch.randn(11, device="spyre", generator=b).cpu(), x)
    assert a.get_offset() == b.get_offset() == 4 * quarter + 12
    c = torch.Generator(device="spyre").manual_seed(seed)
    c.set_offset(4 * quarter + 4)
    assert not torch.equal(torch.randn(11, device="spyre", generator=c).cpu(), x)


def test_default_generator_api_like_cuda():
    torch.spyre.manual_seed(77)
    assert torch.spyre.initial_seed() == 77
    state = torch.spyre.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (16,) and state.view(torch.int64).tolist() == [77, 0]
    a = torch.randn(10, device="spyre").cpu()
    assert torch.spyre.get_rng_state().view(torch.int64).tolist() == [77, 12]
    torch.spyre.set_rng_state(state)
    assert torch.equal(torch.randn(10, device="spyre").cpu(), a)
    with torch.random.fork_rng(device_type="spyre"):
        torch.randn(100, device="spyre")
    assert torch.spyre.get_rng_state().view(torch.int64).tolist() == [77, 12]
    torch.spyre.seed()
    fresh = torch.spyre.initial_seed()
    assert fresh != 77 and torch.spyre.get_rng_state().view(torch.int64).tolist()[1] == 0
    torch.spyre.seed_all()
    assert torch.spyre.initial_seed() != fresh
    torch.manual_seed(5)  # seeds every device's generator too
    assert torch.spyre.get_rng_state().view(torch.int64).tolist() == [5, 0]


def test_dropout_draws_from_the_spyre_generator():
    x = torch.ones(64, device="spyre")
    torch.spyre.manual_seed(3)
    cpu_before = torch.get_rng_state()
    a = torch.nn.functional.dropout(x, 0.5).cpu()
    assert torch.spyre.get_rng_state().view(torch.int64).tolist() == [3, 64]
    assert torch.equal(torch.get_rng_state(), cpu_before)  # the CPU stream is untouched
    torch.spyre.manual_seed(3)
    assert torch.equal(torch.nn.functional.dropout(x, 0.5).cpu(), a)
    assert set(a.unique().tolist()) == {0.0, 2.0}


def test_clone_keeps_seed_and_offset():
    g = torch.Generator(device="spyre").manual_seed(9)
    g.set_offset(40)
    h = g.clone_state()
    assert seed_offset(h) == [9, 40] and h.device == g.device
    assert torch.equal(torch.rand(5, device="spyre", generator=h).cpu(),
                       torch.rand(5, device="spyre", generator=g).cpu())


@pytest.mark.parametrize("bad, error, match", [
    (lambda g: g.set_offset(3), RuntimeError, "multiple of 4, got 3"),
    (lambda g: g.set_state(torch.zeros(15, dtype=torch.uint8)), RuntimeError, "wrong size.*got 15"),
    (lambda g: g.set_state(torch.tensor([1, 6]).view(torch.uint8)), RuntimeError, "multiple of 4, got 6"),
    (lambda g: g.set_state(torch.tensor([1, -4]).view(torch.uint8)), RuntimeError, "negative offset -4"),
    (lambda g: g.set_state(torch.zeros(16)), TypeError, "ByteTensor"),
])
def test_bad_offsets_and_states_raise(bad, error, match):
    g = torch.Generator(device="spyre").manual_seed(1)
    with pytest.raises(error, match=match):
        bad(g)
    assert seed_offset(g) == [1, 0]
