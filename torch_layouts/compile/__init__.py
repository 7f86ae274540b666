"""``torch.compile`` on the spyre device: layout propagation, optimal restickify
placement, strict-mode checks, DCI and SuperDSC-like artifacts.

* ``backend``: the Dynamo/AOT backend (``backend="spyre"``) and the routing of the
  default backend's spyre graphs to it;
* ``propagate``: layout candidates per ATen node from the eager kernels' rules;
* ``placement``: the exact (or bounded, with a proven lower bound) optimiser;
* ``lowering``: plan a graph, check strict mode, insert the restickify nodes;
* ``artifacts`` / ``report``: DCIs, SuperDSCs, ``explain_compile``'s report;
* ``device_interface`` / ``guards``: Dynamo's device interface and the layout guard.

Nothing here imports Dynamo or Inductor until they are imported (``imports``).

Example::

    >>> f = torch.compile(model)            # the default backend, spyre inputs
    >>> print(torch_layouts.explain_compile(model, x))
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .imports import when_imported


def _on_dynamo(_: ModuleType) -> None:
    from . import backend, device_interface, guards

    device_interface.register()
    guards.install()
    backend.install_dynamo()


def _on_inductor(_: ModuleType) -> None:
    from . import backend

    backend.install_inductor()


def install() -> None:
    """Register the compile path when Dynamo / Inductor get imported (now if they are)."""
    when_imported("torch._dynamo", _on_dynamo)
    when_imported("torch._inductor.compile_fx", _on_inductor)


def explain_compile(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Compile ``fn`` for ``args`` on the spyre path and return its report (see ``report``).

    Example::

        >>> r = torch_layouts.explain_compile(lambda x, y: x + y, x, y)
        >>> r.cost_bytes, r.optimal
        (0, True)
    """
    from .report import explain_compile as explain

    return explain(fn, *args, **kwargs)


def demo_report() -> str:
    """The compile report of a small MLP and attention block on spyre (for the demo)."""
    from .demo import demo_report as build

    return build()


__all__ = ["demo_report", "explain_compile", "install"]
