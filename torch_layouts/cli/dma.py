"""``dma``: a layout's DMA program as loop code (default) or DCI-like JSON (``--json PATH``, ``-`` = stdout)."""

from __future__ import annotations

import argparse

from ..dma import dma_program
from .specs import check_output, layout_from_args, write_error


def run(args: argparse.Namespace) -> int:
    """The ``dma`` subcommand."""
    if args.json not in (None, "-"):
        check_output(args.json)
    program = dma_program(layout_from_args(args), direction=args.direction)
    if args.json is None:
        print(program)
    elif args.json == "-":
        print(program.to_json())
    else:
        try:
            with open(args.json, "w", encoding="utf-8") as out:
                out.write(program.to_json() + "\n")
        except OSError as err:
            raise write_error(args.json, err) from None
        print(f"wrote {args.json}: {args.direction.upper()} program, {len(program.nests)} nest(s), "
              f"{program.elements} elements, {len(program.padding)} padding nest(s)")
    return 0
