"""Padding sizes to buckets: the one rule that keeps the number of compiled shapes small.

A jitted function compiles once per input shape. Every place that pads a varying count
(inference batches, replay writes, opponent groups, the API's batches) pads it up to the
next power of two, so a run compiles a handful of shapes instead of one per count:

    power_of_two(5)   # 8
    power_of_two(8)   # 8
    power_of_two(0)   # 1
"""

from __future__ import annotations


def power_of_two(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
