"""``python -m torch_layouts compile SCRIPT``: the report of every graph the script compiles."""

from __future__ import annotations

import json
import subprocess
import sys


def test_compile_command_prints_the_report(tmp_path) -> None:
    script = tmp_path / "model.py"
    script.write_text(
        "import sys, torch, torch_layouts\n"
        "assert sys.argv[1:] == ['--size', '64']\n"
        "x = torch.randn(64, 64, dtype=torch.float16).to('spyre')\n"
        "torch.compile(lambda a: a + a.t())(x)\n")
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "torch_layouts", "compile", "--json", str(out), str(script),
                           "--size", "64"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "[spyre compile] inference graph" in done.stdout
    assert "restickify t for add: 16384 bytes" in done.stdout
    (report,) = json.loads(out.read_text())
    assert report["cost_bytes"] == 16384 and report["optimal"] is True


def test_missing_script_is_a_usage_error(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "torch_layouts", "compile", str(tmp_path / "none.py")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "cannot run" in done.stderr and "Traceback" not in done.stderr
