"""Layout specs on the command line: ``FAMILY[:NOTATION]`` plus shape, dtype, dim order and pad value.

Each family registered in :mod:`torch_layouts.core.family` parses its own notation
(``python -m torch_layouts show --help`` lists them)::

    spyre                      Spyre default layout (spyre:sparse, spyre:dim_order=1,0,2)
    htp:crouton                an HTP named layout or a pair list
    trt:kCHW4                  a TensorRT format; trt:kDLA_HWC4,xavier for a DLA platform
    mace:IN_OUT_CHANNEL        a MACE buffer type or CPU order
    onednn:nChw16c             a oneDNN format tag

Every problem with a spec, a shape or a dtype raises :class:`UsageError` with a
one-line message; the CLI prints it and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from collections.abc import Sequence

import torch

from ..core import family as families
from ..core.dtypes import check_device_dtype
from ..core.layout import DeviceLayout

DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32",
                 "fp8": "float8_e4m3fn", "int": "int32", "long": "int64"}


def spec_help() -> str:
    """The ``layout specs`` and ``logical dims`` lines of ``--help``, from every registered family."""
    lines = ["layout specs:"]
    indent = " " * 30
    for fam in families.families():
        for spec, text in fam.specs:
            body = textwrap.fill(text, 100, initial_indent=indent, subsequent_indent=indent)
            lines.append(f"  {spec:<26}  {body.lstrip()}" if len(spec) <= 26 else f"  {spec}\n{body}")
    dims = "; ".join(f"{fam.name} {fam.logical_dims}" for fam in families.families())
    return "\n".join([*lines, textwrap.fill(f"logical dims: {dims}", 100, subsequent_indent="  "),
                      textwrap.fill(f"default --dtype: {default_dtype_help()}", 100, subsequent_indent="  ")])


def spec_examples() -> str:
    """One example spec per registered family: ``"htp:crouton, mace:IN_OUT_CHANNEL, ..."``."""
    return ", ".join(f.example for f in families.families())


def dim_order_families() -> str:
    """The families that take ``--dim-order`` (``"spyre"``)."""
    return " and ".join(f.name for f in families.families() if "dim_order" in f.options)


def default_dtype_help() -> str:
    return ", ".join(f"{fam.name} {fam.default_dtype}" for fam in families.families())


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


def split_spec(spec: str) -> tuple[families.Family, str]:
    """``"htp:crouton"`` -> (the htp family, ``"crouton"``); the family is checked."""
    name, _, notation = spec.strip().partition(":")
    family = families.lookup(name)
    if family is None:
        raise UsageError(f"bad layout spec {spec!r}: unknown family {name.lower()!r} (expected one of "
                         f"{', '.join(f.name for f in families.families())}, e.g. {spec_examples()})")
    if not family.notation_optional and not notation.strip():
        raise UsageError(f"bad layout spec {spec!r}: {family.name} needs a layout after the colon, e.g. "
                         f"{family.example}")
    return family, notation.strip()


def build_layout(spec: str, shape: Sequence[int], dtype: torch.dtype | None = None,
                 dim_order: Sequence[int] | None = None, pad_value: int | float = 0) -> DeviceLayout:
    """The concrete layout a spec names, bound to a row-major host tensor of ``shape``."""
    family, notation = split_spec(spec)
    if dim_order is not None and "dim_order" not in family.options:
        raise UsageError(f"--dim-order applies to {dim_order_families()} layouts only, not {spec!r}")
    try:
        return family.build(notation, tuple(shape), dtype, pad_value, dim_order)
    except (ValueError, TypeError, IndexError) as err:
        raise UsageError(f"{spec} with --shape {','.join(map(str, shape))}: {err}") from None


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
