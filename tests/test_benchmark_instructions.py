"""``benchmarks/instructions.py`` (instructions per call under callgrind): every case's counted
loop runs on both devices, and the count is read from callgrind's summary or refused by name.
Counting itself needs valgrind, which the test run does not install."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import instructions  # noqa: E402


@pytest.mark.parametrize("device", ["cpu", "spyre"])
@pytest.mark.parametrize("case", list(instructions.CASES))
def test_every_case_runs_its_counted_loop(case, device, monkeypatch):
    calls = []
    make, default_calls = instructions.CASES[case]
    call = make(device)
    monkeypatch.setitem(instructions.CASES, case, (lambda _device: lambda: calls.append(call()), default_calls))
    instructions.child(case, device, 3)
    assert len(calls) == 20 + 3  # the warm-up, then the counted calls


@pytest.mark.parametrize("output, expected", [
    ("==7== Events    : Ir\n==7== Collected : 1234567\n", {"Ir": 1234567}),
    ("==12== Events    : Ir\n==12== Collected :   42\n", {"Ir": 42}),
    ("==9== Events    : Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n"
     "==9== Collected : 25041978 9963023 3979998 753216 312508 109120 118 88 98\n",
     {"Ir": 25041978, "Dr": 9963023, "Dw": 3979998, "I1mr": 753216, "D1mr": 312508, "D1mw": 109120,
      "ILmr": 118, "DLmr": 88, "DLmw": 98}),
])
def test_the_counts_are_callgrinds_summary(output, expected):
    assert instructions.collected(output) == expected


@pytest.mark.parametrize("output", ["valgrind: command not found\n", "==12== Collected :   42\n"])
def test_output_without_a_summary_is_refused(output):
    with pytest.raises(RuntimeError, match="no callgrind summary"):
        instructions.collected(output)
