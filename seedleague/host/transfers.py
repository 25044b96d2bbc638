"""The host's copies between its memory and the accelerator: explicit, one per batch each way, and counted.

A jitted function given numpy arguments copies each one to the device on its own, and `np.asarray` on each
output copies it back on its own: an inference batch of observation, first, core state and legal mask would
cost four copies in and three out, each a separate launch on a GPU. The host's hot paths (the forward pass,
the replay's insert and sample) instead hand the whole batch, as one pytree, to `Transfers.to_device`, and
fetch every output with one `Transfers.to_host`: one `jax.device_put` and one `jax.device_get` per batch, whose
leaves JAX copies together. The counts say so in benchmarks (benchmarks/gpu_pong.py prints them), and under
`jax.transfer_guard("disallow")` any copy made any other way raises, which is how the tests check that none is.

On a CPU device the device's memory is the host's, and `jax.device_put` costs about 40 µs of Python dispatch per
leaf: 0.56 ms for a replay insert's eleven, a quarter of the host's batcher thread on a league game
(benchmarks/README.md, "The host's copies on a CPU"). There `to_device` hands the numpy tree to one jitted identity
instead (0.11 ms for the same tree): still one explicit, counted call, the copy made by XLA's C++ argument
handling. Either way the arrays handed over are the device's from then on: on a CPU the copy may alias or still be
reading them, so the caller must not write to them afterwards (the host hands over fresh arrays only).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Optional

import jax
import numpy as np


@dataclasses.dataclass
class TransferCounts:
    """Copies made so far: calls (one per batch) and the arrays and bytes they carried."""

    to_device: int = 0
    to_device_arrays: int = 0
    to_device_bytes: int = 0
    to_host: int = 0
    to_host_arrays: int = 0
    to_host_bytes: int = 0


class Transfers:
    """Counts every copy its owner makes between host memory and `device`."""

    def __init__(self, device: Optional[jax.Device] = None):
        """`device`: where `to_device` puts arrays (None: JAX's default device)."""
        self.device = device
        self._counts = TransferCounts()
        self._lock = threading.Lock()
        self._host_memory_copy = _host_memory_copy(device)  # None: not a CPU device

    def to_device(self, tree: Any) -> Any:
        """`tree` (numpy arrays, or anything `jax.device_put` takes) on the device, in one call; the caller must not
        write to its arrays afterwards (see the module docstring)."""
        leaves = jax.tree.leaves(tree)
        self._count("to_device", leaves)
        if self._host_memory_copy is not None and all(isinstance(leaf, (np.ndarray, np.generic)) for leaf in leaves):
            with jax.transfer_guard_host_to_device("allow"):  # the explicit copy, made by the jitted call
                return self._host_memory_copy(tree)
        return jax.device_put(tree, self.device)

    def to_host(self, tree: Any) -> Any:
        """`tree`'s device arrays as numpy arrays, fetched in one call."""
        leaves = jax.tree.leaves(tree)
        self._count("to_host", leaves)
        return jax.device_get(tree)

    def counts(self) -> TransferCounts:
        with self._lock:
            return dataclasses.replace(self._counts)

    def _count(self, direction: str, leaves: list) -> None:
        size = sum(getattr(leaf, "nbytes", 0) for leaf in leaves)
        with self._lock:
            counts = self._counts
            setattr(counts, direction, getattr(counts, direction) + 1)
            setattr(counts, f"{direction}_arrays", getattr(counts, f"{direction}_arrays") + len(leaves))
            setattr(counts, f"{direction}_bytes", getattr(counts, f"{direction}_bytes") + size)


def is_cpu(device: Optional[jax.Device]) -> bool:
    """Whether `device` (None: the default device) is a CPU, whose memory is the host's."""
    return (jax.default_backend() if device is None else device.platform) == "cpu"


def _host_memory_copy(device: Optional[jax.Device]) -> Optional[Any]:
    """A jitted identity that copies numpy trees onto `device` (None: the default device) when it is a CPU
    device, else None (an accelerator: `jax.device_put` batches the copy)."""
    if not is_cpu(device):
        return None
    placement = {} if device is None else {"out_shardings": jax.sharding.SingleDeviceSharding(device)}
    return jax.jit(lambda tree: tree, **placement)
