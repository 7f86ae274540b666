"""The compiled-model part of the demo: a float16 MLP and attention block compiled on
spyre, checked against eager, with the compiler's report."""

from __future__ import annotations

import torch

from .models import Attention, mlp
from .report import explain_compile


def demo_cases() -> list[tuple[str, bool, object]]:
    """Compile an MLP and an attention block: (title, equal to eager, compile report) each.

    Example::

        >>> [(title, same) for title, same, _ in demo_cases()]
        [('MLP', True), ('attention block', True)]
    """
    torch.manual_seed(0)
    cases_out = []
    cases = [("MLP", mlp().to(torch.float16), (16, 64)), ("attention block", Attention().to(torch.float16), (2, 8, 64))]
    for title, model, shape in cases:
        model = model.to("spyre")
        x = torch.randn(*shape, dtype=torch.float16).to("spyre")
        with torch.no_grad():
            report = explain_compile(model, x)
            same = torch.equal(torch.compile(model)(x).cpu(), model(x).cpu())
        cases_out.append((title, same, report))
    return cases_out


def demo_report() -> str:
    """The reports of :func:`demo_cases` as text, each headed by whether it equals eager.

    Example::

        >>> print(torch_layouts.compile.demo_report())
    """
    return "\n".join(f"== compiled {title}: equal to eager: {same}\n{report}" for title, same, report in demo_cases())
