"""``python -m torch_layouts``: see layouts, export their DMA programs, run the demo.

    python -m torch_layouts show spyre --shape 5,100,150 --dtype float16 --dim-order 1,0,2
    python -m torch_layouts show htp:crouton --shape 1,3,5,30 --png crouton.png
    python -m torch_layouts dma spyre --shape 1024,256 --json dci.json
    python -m torch_layouts demo

Exit status: 0 on success, 1 when the demo finds a disagreement, 2 for bad
arguments (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence

from .specs import DEFAULT_DTYPE_HELP, UsageError

SPEC_HELP = """layout specs:
  spyre                       Spyre default layout (dim_order 0..r-1)
  spyre:dim_order=1,0,2       a Spyre dim_order (same as --dim-order 1,0,2); a trailing -1 = sparse
  spyre:sparse                one element per stick
  htp:NAME                    crouton, crouton4x1, crouton2x2, crouton2, flat, nchw, d32, convweight,
                              or a table name such as R4CroutonLayout
  htp:4,0,0,1,0,2,0,3,0,1,8,2,8,3,32
                              an HTP ChunkedMemoryLayout pair list (rank, then dim,size pairs)
  trt:FORMAT[,xavier]         a TensorRT format: kLINEAR, kCHW2/4/16/32, kHWC8, kHWC16, kDHWC8, kCDHW32,
                              kHWC, kDHWC, kDLA_LINEAR, kDLA_HWC4 (Orin, or ',xavier')
  mace:TYPE                   a MACE buffer type (IN_OUT_CHANNEL, IN_OUT_HEIGHT, IN_OUT_WIDTH,
                              CONV2D_FILTER, DW_CONV2D_FILTER, ARGUMENT, WEIGHT_HEIGHT, WEIGHT_WIDTH)
                              or a CPU order (CPU_NCHW, CPU_OIHW, CPU_MIHW, CPU_W)
logical dims: spyre any; htp NHWC (conv weights HWIO); trt NCHW (NCDHW); mace NHWC / OIHW / MIHW / W
default --dtype: """ + DEFAULT_DTYPE_HELP


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _wrap(text: str) -> str:
    return textwrap.fill(text, 100)


def _layout_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="layout spec, e.g. spyre, htp:crouton, trt:kCHW4, mace:IN_OUT_CHANNEL")
    parser.add_argument("--shape", required=True, help="host tensor size, e.g. 5,100,150 (row-major)")
    parser.add_argument("--dtype", help=f"element type (default: {DEFAULT_DTYPE_HELP})")
    parser.add_argument("--dim-order", help="spyre only: dim_order, e.g. 1,0,2 (a trailing -1 makes it sparse)")
    parser.add_argument("--pad-value", default="0", help="value held by padding positions (default 0)")


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog="python -m torch_layouts", description=__doc__.replace("``", ""), formatter_class=formatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{show,dma,demo}",
                                     parser_class=_Parser)

    show = commands.add_parser("show", help="a layout in text (and pictures)", epilog=SPEC_HELP,
                               formatter_class=formatter,
                               description=_wrap("Print a layout: notation, device_size/stride_map, padded size, "
                                                 "storage efficiency, its DMA program and a map of device memory."))
    _layout_options(show)
    show.add_argument("--png", metavar="PATH", help="also draw the layout into a PNG picture")
    show.add_argument("--svg", metavar="PATH", help="also draw the layout into an SVG picture")
    show.add_argument("--rows", type=int, default=32, help="memory map rows to print (0 = all; default 32)")
    show.add_argument("--cols", type=int, default=16, help="memory map columns to print (0 = all; default 16)")
    show.add_argument("--dma-lines", type=int, default=40, help="DMA program lines to print (0 = all; default 40)")

    dma = commands.add_parser("dma", help="a layout's DMA program as loop code or JSON", epilog=SPEC_HELP,
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "show":
            from .show import run
        elif args.command == "dma":
            from .dma import run
        else:
            from .demo import run
        return run(args)
    except UsageError as err:
        message = " ".join(str(err).split())
        print(f"python -m torch_layouts {args.command}: error: {message}", file=sys.stderr)
        return 2
