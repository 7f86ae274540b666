"""The family protocol: what a layout family tells the CLI, the pictures and serialization.

Each family module (``spyre``, ``htp``, ``tensorrt``, ``mace``, ``onednn``) ends with one
``register(Family(...))``; ``cli``, ``viz`` and ``torch.load``'s safe list ask this
registry and never name a family (docs/design.md section 7, "Adding a family")::

    register(Family(name="toy", layout_types=(ToyLayout,), build=build_toy,
                    specs=(("toy:N", "a toy layout"),), example="toy:2", logical_dims="any"))
    of(ToyLayout(...)).chunk_name(layout)      # -> "row"

A family's templates (``LayoutTemplate`` subclasses) already work in
``x.to("spyre", device_layout=...)``; registering adds the ``FAMILY:NOTATION`` spec on the
command line, picture labels, ``show``'s family facts and ``weights_only`` loading.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .layout import DeviceLayout

Facts = list[tuple[str, str]]
# build(notation, host_size, dtype or None (the family's default), pad_value, dim_order or None) -> layout
Builder = Callable[[str, tuple[int, ...], torch.dtype | None, int | float, Sequence[int] | None], DeviceLayout]


def no_facts(layout: DeviceLayout) -> Facts:
    return []


def row_chunks(layout: DeviceLayout) -> str:
    return "row"


def auto_line(layout: DeviceLayout) -> int | None:
    return None


@dataclass(frozen=True)
class Family:
    """One layout family as the tools see it.

    * ``name``/``aliases``: the spec prefix (``htp`` in ``htp:crouton``), case-insensitive.
    * ``layout_types``: its concrete layout classes; ``of(layout)`` finds the family by them.
    * ``build``: a spec's notation (the text after the colon) bound to a row-major host
      size; raises ValueError/TypeError naming the bad value. ``dim_order`` is only passed
      to families listing ``"dim_order"`` in ``options``.
    * ``specs``, ``example``, ``logical_dims``, ``default_dtype``: ``--help`` text.
    * ``chunk_name``: what a row of the last device dim is called (pictures, legends).
    * ``facts``: ``show``'s extra lines in the family's own vocabulary.
    * ``picture_line``: chunks per drawn line of device memory (None: the picture chooses).
    * ``safe_classes``: templates, enums and other values pickled with its layouts.
    * ``device_default``: the layout a device tensor gets without ``device_layout``, as
      ``device_default(size, stride, dtype)``; one family (the device's own) declares it.
    """

    name: str
    layout_types: tuple[type, ...]
    build: Builder
    specs: tuple[tuple[str, str], ...]
    example: str
    logical_dims: str
    default_dtype: str = "float32"
    aliases: tuple[str, ...] = ()
    notation_optional: bool = False
    options: tuple[str, ...] = ()
    chunk_name: Callable[[DeviceLayout], str] = row_chunks
    facts: Callable[[DeviceLayout], Facts] = no_facts
    picture_line: Callable[[DeviceLayout], int | None] = auto_line
    safe_classes: tuple[type, ...] = ()
    device_default: Callable[[Sequence[int], Sequence[int], torch.dtype], DeviceLayout] | None = None


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family (replacing one of the same name); its classes become ``weights_only``-loadable."""
    if not isinstance(family, Family):
        raise TypeError(f"register takes a Family, got {family!r}")
    for key in (family.name, *family.aliases):
        owner = lookup(key)
        if owner is not None and owner.name != family.name:
            raise ValueError(f"family name {key!r} is already taken by family {owner.name!r}")
    _FAMILIES[family.name.lower()] = family
    torch.serialization.add_safe_globals([*family.layout_types, *family.safe_classes])
    return family


def unregister(name: str) -> None:
    """Remove a family (tests that register toy families clean up with this)."""
    family = lookup(name)
    if family is None:
        raise KeyError(f"no layout family named {name!r}")
    del _FAMILIES[family.name.lower()]


def families() -> tuple[Family, ...]:
    """Every registered family, by name."""
    return tuple(_FAMILIES[name] for name in sorted(_FAMILIES))


def lookup(name: str) -> Family | None:
    """The family a spec prefix names (its name or an alias, any case), or None."""
    key = name.strip().lower()
    return next((f for f in _FAMILIES.values() if key == f.name.lower() or key in map(str.lower, f.aliases)), None)


def device_default(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> DeviceLayout:
    """The layout a device tensor of this size, strides and dtype gets without ``device_layout``.

    Example::

        >>> device_default((4, 100), (100, 1), torch.float16).device_size
        (2, 4, 64)
    """
    owners = [f for f in _FAMILIES.values() if f.device_default is not None]
    if len(owners) != 1:
        raise RuntimeError(f"exactly one layout family must declare the device's default layout, "
                           f"found {[f.name for f in owners]}")
    return owners[0].device_default(size, stride, dtype)


def of(layout: DeviceLayout) -> Family | None:
    """The family a concrete layout belongs to, or None for a plain core ``DeviceLayout``."""
    return next((f for f in _FAMILIES.values() if isinstance(layout, f.layout_types)), None)
