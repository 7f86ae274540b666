"""Autocast on spyre: ``torch.autocast("spyre")`` casts ops by CUDA's policies (``csrc/autocast.cpp``).

Example::

    >>> with torch.autocast("spyre", dtype=torch.float16):
    ...     (a @ b).dtype
    torch.float16
"""

from __future__ import annotations

import torch


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The lower-precision dtypes ``torch.autocast("spyre", dtype=...)`` accepts."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Spyre holds bfloat16 tensors natively."""
    return True
