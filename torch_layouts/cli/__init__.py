"""``python -m torch_layouts``: see layouts, export their DMA programs, run the demo.

    python -m torch_layouts show spyre --shape 5,100,150 --dtype float16 --dim-order 1,0,2
    python -m torch_layouts show htp:crouton --shape 1,3,5,30 --png crouton.png
    python -m torch_layouts dma spyre --shape 1024,256 --json dci.json
    python -m torch_layouts demo
    python -m torch_layouts compile script.py   # the spyre compiler's report of each compiled graph

Exit status: 0 on success, 1 when the demo finds a disagreement, 2 for bad
arguments (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence

from . import compile as compile_command
from .specs import UsageError, default_dtype_help, dim_order_families, spec_examples, spec_help


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _wrap(text: str) -> str:
    return textwrap.fill(text, 100)


def _layout_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help=f"layout spec, e.g. {spec_examples()}")
    parser.add_argument("--shape", required=True, help="host tensor size, e.g. 5,100,150 (row-major)")
    parser.add_argument("--dtype", help=f"element type (default: {default_dtype_help()})")
    parser.add_argument("--dim-order", help=f"dim_order for {dim_order_families()} layouts, e.g. 1,0,2 (a trailing -1 "
                                            "makes it sparse)")
    parser.add_argument("--pad-value", default="0", help="value held by padding positions (default 0)")


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog="python -m torch_layouts", description=__doc__.replace("``", ""), formatter_class=formatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{show,dma,demo,compile}",
                                     parser_class=_Parser)

    show = commands.add_parser("show", help="a layout in text (and pictures)", epilog=spec_help(),
                               formatter_class=formatter,
                               description=_wrap("Print a layout: notation, device_size/stride_map, padded size, "
                                                 "storage efficiency, its DMA program and a map of device memory."))
    _layout_options(show)
    show.add_argument("--png", metavar="PATH", help="also draw the layout into a PNG picture")
    show.add_argument("--svg", metavar="PATH", help="also draw the layout into an SVG picture")
    show.add_argument("--rows", type=int, default=32, help="memory map rows to print (0 = all; default 32)")
    show.add_argument("--cols", type=int, default=16, help="memory map columns to print (0 = all; default 16)")
    show.add_argument("--dma-lines", type=int, default=40, help="DMA program lines to print (0 = all; default 40)")

    dma = commands.add_parser("dma", help="a layout's DMA program as loop code or JSON", epilog=spec_help(),
                              formatter_class=formatter,
                              description=_wrap("Print the DMA program moving a row-major host tensor into (h2d) "
                                                "or out of (d2h) the layout: loop code, or DCI-like JSON with "
                                                "--json."))
    _layout_options(dma)
    dma.add_argument("--direction", choices=("h2d", "d2h"), default="h2d", help="transfer direction (default h2d)")
    dma.add_argument("--json", metavar="PATH", help="write the program as JSON to PATH ('-' for stdout)")

    demo = commands.add_parser("demo", help="move real tensors through every layout family and run a model",
                               formatter_class=formatter,
                               description=_wrap("Moves tensors through a layout of each family to the spyre "
                                                 "device and back, relayouts them device to device, runs small "
                                                 "models on the device against the CPU, and draws pictures. Exits "
                                                 "1 if any check fails. (Test hook: TORCH_LAYOUTS_DEMO_CORRUPT=1 "
                                                 "flips one element of device memory after the first upload.)"))
    demo.add_argument("--out", default="layout_pictures", help="folder for the pictures (default ./layout_pictures)")
    demo.add_argument("--no-pictures", action="store_true", help="skip the pictures")
    compile_command.add_parser(commands, formatter)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "show":
            from .show import run
        elif args.command == "dma":
            from .dma import run
        elif args.command == "compile":
            from .compile import run
        else:
            from .demo import run
        return run(args)
    except UsageError as err:
        message = " ".join(str(err).split())
        print(f"python -m torch_layouts {args.command}: error: {message}", file=sys.stderr)
        return 2
