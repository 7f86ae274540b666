"""The names runtime/planner.py imports; the planning itself is ``core/mapping.py``.

``plan(res, other, offset, broadcast_full)`` is ``core.mapping.refined_nests``.
"""

from ..core.mapping import Fill, Transfer, elements, host_digits, padding, span, swap
from ..core.mapping import refined_nests as plan

__all__ = ["Fill", "Transfer", "elements", "host_digits", "padding", "plan", "span", "swap"]
