"""Padding sizes to buckets: the one rule that keeps the number of compiled shapes small.

A jitted function compiles once per input shape. Every place that pads a varying count
(inference batches, replay writes, opponent groups, the API's batches) pads it up to the
next power of two, so a run compiles a handful of shapes instead of one per count:

    power_of_two(5)   # 8
    power_of_two(8)   # 8
    power_of_two(0)   # 1
    pad(x, power_of_two(len(x)))                 # rows of 0 appended (pad(mask, size, True): legal rows)
    pad_dict(observation, 8)                     # each array: 0, and true for bool arrays (entity masks)
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np


def power_of_two(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def pad(x: np.ndarray, size: int, value: Any = 0) -> np.ndarray:
    """`x` with rows of `value` appended up to `size` rows."""
    if len(x) == size:
        return x
    padding = np.full((size - len(x),) + x.shape[1:], value, x.dtype)
    return np.concatenate([x, padding])


def pad_dict(arrays: dict, size: int, value: Optional[Any] = None) -> dict:
    """Each array padded to `size` rows of `value` (None: 0, and true for bool arrays such as masks, so padded
    rows stay finite and have a legal action)."""
    return {key: pad(x, size, (x.dtype == bool) if value is None else value) for key, x in arrays.items()}
