"""``compile``: run a Python script and print the spyre compiler's report of every graph
it compiles with ``torch.compile`` (layouts, restickifies, cost, DCIs and SuperDSCs count).

    python -m torch_layouts compile train.py --epochs 1
    python -m torch_layouts compile --json report.json model.py
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys

from .specs import UsageError, check_output


def add_parser(commands: argparse._SubParsersAction, formatter: type) -> None:
    """The ``compile`` subcommand's arguments."""
    parser = commands.add_parser(
        "compile", help="run a script, print the spyre compiler's report of each compiled graph",
        formatter_class=formatter,
        description="Runs SCRIPT (with ARGS as its sys.argv[1:]) and prints, for every graph torch.compile "
                    "compiles on spyre, the chosen layouts, the restickifies with their bytes, the total cost "
                    "and whether it is optimal (else the gap to a proven lower bound).")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    parser.add_argument("--json", metavar="PATH", help="also write every report's JSON (a list) to PATH ('-': stdout)")


def run(args: argparse.Namespace) -> int:
    """The ``compile`` subcommand."""
    from ..compile.report import collect

    if args.json not in (None, "-"):
        check_output(args.json)
    argv = sys.argv
    sys.argv = [args.script, *args.args]
    try:
        with collect() as reports:
            runpy.run_path(args.script, run_name="__main__")
    except FileNotFoundError as err:
        raise UsageError(f"cannot run {args.script!r}: {err.strerror}") from None
    finally:
        sys.argv = argv
    reports = [r for r in reports if r.plans]
    for i, report in enumerate(reports):
        print(f"=== compiled graph set {i + 1} of {len(reports)}")
        print(report)
    if not reports:
        print("no graph with spyre tensors was compiled")
    if args.json is not None:
        text = json.dumps([r.to_dict() for r in reports], indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as out:
                out.write(text + "\n")
    return 0
