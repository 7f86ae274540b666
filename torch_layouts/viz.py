"""Pictures of a layout, like the figures of Spyre's documentation: the host (logical) view coloured by
device chunk, and device memory in the same colours with the padding hatched.

A *chunk* is one row of the last device dim, named by the layout's family
(``Family.chunk_name``): a Spyre stick, a row of an HTP chunk, a TensorRT vector or
pixel, a MACE RGBA pixel, a oneDNN block. Element colour = ``device offset //
device_size[-1]``, cycling through 20 colours. Host tensors of rank > 2 are drawn with
their leading dims flattened into rows (thin lines separate slices of the
second-to-last dim). Device memory is drawn in order, left to right and top to bottom,
a block of trailing device dims per line, or as many chunks as the family's
``picture_line`` says (a MACE image: one image row per line).

    torch_layouts.viz.draw(layout, "layout.png")            # PNG (Agg) or, by suffix, SVG
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.collections import PatchCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from .core import family as families
from .core.layout import DeviceLayout

FIGSIZE = (13.0, 6.5)  # inches; pictures are FIGSIZE * dpi pixels
DPI = 100
MAX_ELEMENTS = 2**24  # larger layouts are refused: computing every element's colour would take too long
MAX_LINES = 400  # rows drawn per panel; the panel title says when more were cut
ANNOTATE_CELLS = 256  # panels with at most this many cells print each cell's host index
_TAB20 = [tuple(c) for c in colormaps["tab20"].colors]
PALETTE = np.array(_TAB20[0::2] + _TAB20[1::2])  # neighbouring chunks get clearly different colours
PAD_COLOUR = (0.86, 0.86, 0.86)
HATCH_COLOUR = (0.45, 0.45, 0.45)
PAD, EMPTY = -1, -2  # device cells: padding, beyond the end of memory (last wrapped line)


def chunk_name(layout: DeviceLayout) -> str:
    """What a row of the last device dim is called in the layout's family (its ``Family.chunk_name``)."""
    family = families.of(layout)
    return "row" if family is None else family.chunk_name(layout)


def chunk_ids(layout: DeviceLayout, host_size: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The colours' meaning: the chunk of every device position (``PAD`` for padding) and of every
    host element (row-major), for a host tensor of ``host_size`` (default: the bound one)."""
    size = layout.resolve(host_size).size
    return _chunks(layout, layout.host_map(size), math.prod(size))


def _chunks(layout: DeviceLayout, host_map: torch.Tensor, host_numel: int) -> tuple[torch.Tensor, torch.Tensor]:
    real = host_map >= 0
    device = torch.where(real, torch.arange(layout.device_numel) // layout.device_size[-1], PAD)
    host = torch.full((host_numel,), PAD, dtype=torch.int64)
    host[host_map[real]] = device[real]
    return device, host


def draw(layout: DeviceLayout, path: str | os.PathLike, host_size: Sequence[int] | None = None, *,
         fmt: str | None = None, dpi: int = DPI) -> Figure:
    """Draw ``layout`` holding a row-major host tensor of ``host_size`` (default: the one it is bound to).

    ``fmt`` is the file format (default: from the file name: SVG for ``.svg``, else PNG).
    Returns the figure, already written to ``path`` (its axes: host view, device memory).
    Raises OSError when ``path`` cannot be written, ValueError for layouts of more than
    ``MAX_ELEMENTS`` device elements.
    """
    size = layout.resolve(host_size).size
    if layout.device_numel > MAX_ELEMENTS:
        raise ValueError(f"{layout.describe()} has {layout.device_numel} device elements; pictures are drawn "
                         f"for at most {MAX_ELEMENTS} (pick a smaller host size)")
    host_map = layout.host_map(size)
    device, host = _chunks(layout, host_map, math.prod(size))
    unit = layout.device_size[-1]
    n_chunks = layout.device_numel // unit if unit else 0
    name = chunk_name(layout)
    fig = Figure(figsize=FIGSIZE)
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.17, top=0.86, wspace=0.18)
    ax_host, ax_dev = fig.subplots(1, 2)
    _host_panel(ax_host, host, size, name)
    _device_panel(ax_dev, device, host_map, layout, name)
    fig.suptitle(textwrap.fill(layout.describe(), 130), fontsize=10)
    fig.legend(handles=_legend(n_chunks, name), loc="lower center", ncol=8, fontsize=8, frameon=False)
    if fmt is None:
        fmt = "svg" if str(path).lower().endswith(".svg") else "png"
    fig.savefig(path, dpi=dpi, format=fmt)
    return fig


def _colours(cells: np.ndarray) -> np.ndarray:
    rgb = PALETTE[np.where(cells >= 0, cells, 0) % len(PALETTE)]
    rgb[cells == PAD] = PAD_COLOUR
    rgb[cells == EMPTY] = (1.0, 1.0, 1.0)
    return rgb


def _host_panel(ax: Axes, host: torch.Tensor, size: tuple[int, ...], name: str) -> None:
    cols = size[-1] if size else 1
    rows = host.numel() // cols if cols else 0
    title = f"host (logical) view {list(size)}: colour = device {name}"
    if rows == 0:
        ax.set_title(title, fontsize=9)
        ax.text(0.5, 0.5, "empty tensor", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    grid = host.view(rows, cols).numpy()
    drawn = min(rows, MAX_LINES)
    if drawn < rows:
        title += f" (first {drawn} of {rows} rows)"
    _image(ax, grid[:drawn], title)
    if len(size) >= 3 and size[-2] > 1:  # separate slices of the leading dims
        for r in range(size[-2], drawn, size[-2]):
            ax.axhline(r - 0.5, color="black", linewidth=0.6)
    ax.set_xlabel(f"dim {len(size) - 1} (size {cols})" if size else "rank 0", fontsize=8)
    ax.set_ylabel(f"dims 0..{len(size) - 2} flattened ({rows} rows)" if len(size) > 1 else "", fontsize=8)
    if grid[:drawn].size <= ANNOTATE_CELLS:
        _annotate(ax, np.arange(drawn * cols).reshape(drawn, cols), grid[:drawn])


def _device_panel(ax: Axes, device: torch.Tensor, host_map: torch.Tensor, layout: DeviceLayout, name: str) -> None:
    unit = layout.device_size[-1]
    n_chunks = layout.device_numel // unit if unit else 0
    per_line = _per_line(layout)
    width = per_line * unit
    lines = -(-n_chunks // per_line) if n_chunks else 0
    cells = np.full(lines * width, EMPTY, dtype=np.int64)
    cells[: layout.device_numel] = device.numpy()
    grid = cells.reshape(lines, width)
    drawn = min(lines, MAX_LINES)
    title = (f"device memory {list(layout.device_size)}: {n_chunks} {name}(s) of {unit}, "
             f"{per_line} per line, padding hatched")
    if drawn < lines:
        title += f" (first {drawn} of {lines} lines)"
    if drawn == 0:
        ax.set_title(title, fontsize=9)
        ax.set_axis_off()
        return
    _image(ax, grid[:drawn], title)
    for x in range(unit, width, unit):
        ax.axvline(x - 0.5, color="black", linewidth=1.0)
    runs = [Rectangle((start - 0.5, top - 0.5), stop - start, bottom - top)
            for top, bottom, start, stop in _pad_blocks(grid[:drawn])]
    ax.add_collection(PatchCollection(runs, facecolor="none", edgecolor=HATCH_COLOUR, hatch="////", linewidth=0))
    ax.set_xlabel(f"offset within a line of {per_line} {name}(s) ({width} elements)", fontsize=8)
    ax.set_ylabel("device memory, in order (lines)", fontsize=8)
    if grid[:drawn].size <= ANNOTATE_CELLS:
        labels = np.full(lines * width, PAD, dtype=np.int64)
        labels[: layout.device_numel] = host_map.numpy()
        _annotate(ax, labels.reshape(lines, width)[:drawn], grid[:drawn])


def _per_line(layout: DeviceLayout) -> int:
    """Chunks per drawn line: the family's choice (a MACE image's width), else the block of
    trailing device dims that makes the panel closest to twice as wide as tall."""
    family = families.of(layout)
    chosen = None if family is None else family.picture_line(layout)
    if chosen is not None:
        return chosen
    unit = layout.device_size[-1]
    if unit == 0 or layout.device_numel == 0:
        return 1
    target = math.sqrt(2 * layout.device_numel) / unit
    candidates = [math.prod(layout.device_size[j:-1]) for j in range(layout.device_rank - 1)] + [1]
    return min(candidates, key=lambda k: (abs(math.log(k / target)), k))


def _image(ax: Axes, grid: np.ndarray, title: str) -> None:
    rows, cols = grid.shape
    aspect = "equal" if max(rows / cols, cols / rows) <= 4 else "auto"
    ax.imshow(_colours(grid), interpolation="nearest", aspect=aspect)
    ax.set_title(title, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if rows * cols <= 4 * ANNOTATE_CELLS:  # cell borders
        ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
        ax.grid(which="minor", color="white", linewidth=0.5)
        ax.tick_params(which="minor", length=0)


def _annotate(ax: Axes, labels: np.ndarray, cells: np.ndarray) -> None:
    size = 7 if labels.shape[1] <= 16 else 5
    for (r, c), value in np.ndenumerate(labels):
        if cells[r, c] >= 0:
            ax.text(c, r, str(value), ha="center", va="center", fontsize=size, color="black", clip_on=True)


def _pad_blocks(grid: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Padding as rectangles (top, bottom, start, stop): runs within a line, merged with the
    same run on the lines below."""
    blocks, open_runs = [], {}
    for row, line in enumerate(grid):
        is_pad = np.concatenate([[False], line == PAD, [False]])
        edges = np.flatnonzero(is_pad[1:] != is_pad[:-1]).tolist()
        runs = set(zip(edges[0::2], edges[1::2]))
        for run in set(open_runs) - runs:
            blocks.append((open_runs.pop(run), row, *run))
        for run in runs - set(open_runs):
            open_runs[run] = row
    blocks += [(top, len(grid), *run) for run, top in open_runs.items()]
    return blocks


def _legend(n_chunks: int, name: str) -> list[Patch]:
    shown = min(n_chunks, 6)
    handles = [Patch(facecolor=PALETTE[i % len(PALETTE)], label=f"{name} {i}") for i in range(shown)]
    if n_chunks > shown:
        repeat = f", colours repeat every {len(PALETTE)}" if n_chunks > len(PALETTE) else ""
        handles.append(Patch(facecolor="white", edgecolor="white", label=f"... {n_chunks} {name}s{repeat}"))
    handles.append(Patch(facecolor=PAD_COLOUR, edgecolor=HATCH_COLOUR, hatch="////", label="padding (pad value)"))
    return handles
