"""The examples in the layout core's, the families' and the device kernels' docstrings run as
written (``doctest``): an example that rots fails here."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
import torch

import torch_layouts
from torch_layouts import core, dma, ops

MODULES = sorted(
    [f"{package.__name__}.{info.name}" for package in (core, dma, ops) for info in pkgutil.iter_modules(package.__path__)]
    + [f"torch_layouts.{name}" for name in ("spyre", "htp", "tensorrt", "mace", "onednn")])


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run_as_written(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"torch": torch, "torch_layouts": torch_layouts},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
