"""Recognising PyTorch tensors without importing torch (a user without torch pays nothing)."""

from __future__ import annotations

from typing import Any


def is_torch_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach") and hasattr(obj, "numpy")
