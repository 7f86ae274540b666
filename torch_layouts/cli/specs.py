"""Layout specs on the command line: ``FAMILY[:NOTATION]`` plus shape, dtype, dim order and pad value.

Specs (``python -m torch_layouts show --help`` lists them too)::

    spyre                      Spyre default layout
    spyre:dim_order=1,0,2      a Spyre dim_order (a trailing -1 makes it sparse)
    spyre:sparse               the default dim order, sparse (one element per stick)
    htp:crouton                an HTP named layout (htp.NAMED, htp.TABLE) or a pair list
    htp:4,0,0,1,0,2,0,3,0,1,8,2,8,3,32
    trt:kCHW4                  a TensorRT format; trt:kDLA_HWC4,xavier for a DLA platform
    mace:IN_OUT_CHANNEL        a MACE buffer type or CPU order

Every problem with a spec, a shape or a dtype raises :class:`UsageError` with a
one-line message; the CLI prints it and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import torch

from .. import htp, mace, tensorrt
from ..core.dtypes import check_device_dtype
from ..core.layout import DeviceLayout
from ..spyre import SpyreTensorLayout

FAMILIES = ("spyre", "htp", "trt", "mace")
ALIASES = {"tensorrt": "trt"}
DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32",
                 "fp8": "float8_e4m3fn", "int": "int32", "long": "int64"}

FP32_ONLY_TRT = (tensorrt.TensorFormat.kHWC, tensorrt.TensorFormat.kDHWC)
DEFAULT_DTYPE_HELP = ("float16 for spyre and trt (float32 for the FP32-only TensorRT formats kHWC, kDHWC), "
                      "float32 for htp and mace")


class UsageError(ValueError):
    """A bad command-line value; the message is one line that names it."""


def parse_ints(text: str, what: str, minimum: int) -> tuple[int, ...]:
    """``"5,100,150"`` (or ``5x100x150``; empty for rank 0) as ints ``>= minimum``."""
    parts = [p.strip() for p in text.replace("x", ",").split(",")] if text.strip() else []
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise UsageError(f"bad {what} {text!r}: expected comma-separated integers like 5,100,150") from None
    if any(v < minimum for v in values):
        raise UsageError(f"bad {what} {text!r}: every value must be >= {minimum}")
    return values


def parse_shape(text: str) -> tuple[int, ...]:
    return parse_ints(text, "--shape", 0)


def parse_dim_order(text: str) -> tuple[int, ...]:
    return parse_ints(text, "dim order", -1)


def parse_dtype(name: str) -> torch.dtype:
    """A device dtype from its torch name (``float16``) or a short alias (``fp16``, ``bf16``)."""
    key = name.strip().lower().removeprefix("torch.")
    dtype = getattr(torch, DTYPE_ALIASES.get(key, key), None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(f"bad --dtype {name!r}: not a torch dtype (try float16, bfloat16, float32, int8)")
    try:
        return check_device_dtype(dtype, "--dtype")
    except ValueError as err:
        raise UsageError(str(err)) from None


def parse_pad_value(text: str) -> int | float:
    """An int when the text is one (``-3``), else a float (``1.5``, ``nan``, ``inf``)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise UsageError(f"bad --pad-value {text!r}: expected a number")


def split_spec(spec: str) -> tuple[str, str]:
    """``"htp:crouton"`` -> ``("htp", "crouton")``; the family is checked."""
    family, _, notation = spec.strip().partition(":")
    family = ALIASES.get(family.lower(), family.lower())
    if family not in FAMILIES:
        raise UsageError(f"bad layout spec {spec!r}: unknown family {family!r} (expected one of "
                         f"{', '.join(FAMILIES)}, e.g. spyre, htp:crouton, trt:kCHW4, mace:IN_OUT_CHANNEL)")
    if family != "spyre" and not notation.strip():
        raise UsageError(f"bad layout spec {spec!r}: {family} needs a layout after the colon, e.g. "
                         f"{dict(htp='htp:crouton', trt='trt:kCHW4', mace='mace:IN_OUT_CHANNEL')[family]}")
    return family, notation.strip()


def default_dtype(family: str) -> torch.dtype:
    return torch.float16 if family in ("spyre", "trt") else torch.float32


def build_layout(spec: str, shape: Sequence[int], dtype: torch.dtype | None = None,
                 dim_order: Sequence[int] | None = None, pad_value: int | float = 0) -> DeviceLayout:
    """The concrete layout a spec names, bound to a row-major host tensor of ``shape``."""
    family, notation = split_spec(spec)
    if dim_order is not None and family != "spyre":
        raise UsageError(f"--dim-order applies to spyre layouts only, not {spec!r}")
    try:
        if family == "spyre":
            order = _spyre_dim_order(notation, len(shape), dim_order)
            return SpyreTensorLayout(tuple(shape), dtype or default_dtype(family), order, pad_value=pad_value)
        if family == "htp":
            template = htp.parse(notation)
            if pad_value != 0:
                pairs = [v for pair in template.pairs for v in pair]
                template = htp.ChunkedMemoryLayout(template.rank, *pairs, pad_value=pad_value)
            return template.bind(tuple(shape), dtype or default_dtype(family))
        if family == "trt":
            return _trt_layout(notation, tuple(shape), dtype, pad_value)
        if pad_value != 0:
            raise UsageError(f"MACE layouts always pad with zero; --pad-value {pad_value} is not possible "
                             f"for {spec!r}")
        return mace.parse(notation).bind(tuple(shape), dtype or default_dtype(family))
    except UsageError:
        raise
    except (ValueError, TypeError, IndexError) as err:
        raise UsageError(f"{spec} with --shape {','.join(map(str, shape))}: {err}") from None


def _spyre_dim_order(notation: str, rank: int, dim_order: Sequence[int] | None) -> list[int] | None:
    """The dim_order of ``spyre``, ``spyre:sparse`` or ``spyre:dim_order=...``, merged with --dim-order."""
    text = notation.replace(" ", "")
    if text in ("", "sparse"):
        order = None if dim_order is None else list(dim_order)
        if text == "sparse":
            order = (order or list(range(rank)))
            order = order if order[-1:] == [-1] else order + [-1]
        return order
    if text.startswith("dim_order="):
        order = list(parse_dim_order(text.removeprefix("dim_order=")))
        if dim_order is not None and list(dim_order) != order:
            raise UsageError(f"spyre:{notation} and --dim-order {','.join(map(str, dim_order))} disagree")
        return order
    raise UsageError(f"bad spyre spec 'spyre:{notation}': expected spyre, spyre:sparse or spyre:dim_order=1,0,2")


def _trt_layout(notation: str, shape: tuple[int, ...], dtype: torch.dtype | None,
                pad_value: int | float) -> tensorrt.TensorFormatLayout:
    template = tensorrt.parse(notation)
    fmt, dla = (template, None) if isinstance(template, tensorrt.TensorFormat) else (template.format, template.dla)
    if dtype is None:
        dtype = torch.float32 if fmt in FP32_ONLY_TRT else torch.float16
    return tensorrt.TensorFormatLayout(fmt, shape, dtype, dla=dla, pad_value=pad_value)


def layout_from_args(args: argparse.Namespace) -> DeviceLayout:
    """The layout named by the ``spec``, ``--shape``, ``--dtype``, ``--dim-order`` and ``--pad-value`` options."""
    dtype = None if args.dtype is None else parse_dtype(args.dtype)
    dim_order = None if args.dim_order is None else parse_dim_order(args.dim_order)
    return build_layout(args.spec, parse_shape(args.shape), dtype, dim_order, parse_pad_value(args.pad_value))


def check_output(path: str) -> None:
    """Fail early, before any work, when ``path`` cannot be a file we write."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or os.path.isdir(path):
        reason = "is a folder" if os.path.isdir(path) else f"folder {folder!r} does not exist"
        raise UsageError(f"cannot write {path!r}: {reason}")


def write_error(path: object, err: OSError) -> UsageError:
    """The one-line error for an output path that cannot be written."""
    return UsageError(f"cannot write {str(path)!r}: {err.strerror or err}")
