"""The host's copies between its memory and the accelerator: explicit, one per batch each way, and counted.

A jitted function given numpy arguments copies each one to the device on its own, and `np.asarray` on each
output copies it back on its own: an inference batch of observation, first, core state and legal mask would
cost four copies in and three out, each a separate launch on a GPU. The host's hot paths (the forward pass,
the replay's insert and sample) instead hand the whole batch, as one pytree, to `Transfers.to_device`, and
fetch every output with one `Transfers.to_host`. On an accelerator each of those packs its tree into one byte
buffer (seedleague.host.packing): one copy each way per batch, whatever the number of arrays. The counts say so
in benchmarks (benchmarks/gpu_pong.py prints them), and under `jax.transfer_guard("disallow")` any copy made any
other way raises, which is how the tests check that none is.

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

from seedleague.host import packing

MAX_LAYOUTS = 256  # packing plans kept per Transfers (the host's batches come in a few bucket sizes)


@dataclasses.dataclass
class TransferCounts:
    """Copies made so far: calls (one per batch) and the arrays and bytes they carried."""

    to_device: int = 0
    to_device_arrays: int = 0
    to_device_bytes: int = 0
    to_host: int = 0
    to_host_arrays: int = 0
    to_host_bytes: int = 0
    to_device_buffers: int = 0  # the copies made: one per call when packed, else one per array
    to_host_buffers: int = 0


class Transfers:
    """Counts every copy its owner makes between host memory and `device`."""

    def __init__(self, device: Optional[jax.Device] = None, packed: Optional[bool] = None):
        """`device`: where `to_device` puts arrays (None: JAX's default device). `packed`: copy a tree as one
        byte buffer each way (None: exactly when `device` is not a CPU, whose copies are not DMAs)."""
        self.device = device
        self.packed = not is_cpu(device) if packed is None else packed
        self._counts = TransferCounts()
        self._lock = threading.Lock()
        self._host_memory_copy = _host_memory_copy(device)  # None: not a CPU device
        self._layouts: dict[tuple, packing.Layout] = {}  # by tree structure, shapes and dtypes

    def to_device(self, tree: Any) -> Any:
        """`tree` (numpy arrays, or anything `jax.device_put` takes) on the device, in one call; the caller must not
        write to its arrays afterwards (see the module docstring)."""
        leaves = jax.tree.leaves(tree)
        on_host = all(isinstance(leaf, (np.ndarray, np.generic)) for leaf in leaves)
        if self.packed and on_host and len(leaves) > 1:  # one array is one copy already
            arrays, treedef = packing.host_leaves(tree)
            layout = self._layout(treedef, arrays)
            self._count("to_device", leaves, buffers=1)
            buffer = jax.device_put(packing.pack_on_host(layout, arrays), self.device)
            return packing.unpacker(layout)(buffer)
        self._count("to_device", leaves, buffers=len(leaves))
        if self._host_memory_copy is not None and on_host:
            with jax.transfer_guard_host_to_device("allow"):  # the explicit copy, made by the jitted call
                return self._host_memory_copy(tree)
        return jax.device_put(tree, self.device)

    def to_host(self, tree: Any) -> Any:
        """`tree`'s device arrays as numpy arrays, fetched in one call."""
        leaves, treedef = jax.tree.flatten(tree)
        if self.packed and len(leaves) > 1 and _on_one_device(leaves):
            layout = self._layout(treedef, leaves)
            self._count("to_host", leaves, buffers=1)
            return packing.unpack_on_host(layout, np.asarray(jax.device_get(packing.packer(layout)(leaves))))
        self._count("to_host", leaves, buffers=len(leaves))
        return jax.device_get(tree)

    def counts(self) -> TransferCounts:
        with self._lock:
            return dataclasses.replace(self._counts)

    def _layout(self, treedef: Any, leaves: list) -> packing.Layout:
        shapes, dtypes = tuple(leaf.shape for leaf in leaves), tuple(leaf.dtype for leaf in leaves)
        key = (treedef, shapes, dtypes)
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) >= MAX_LAYOUTS:  # shapes that keep changing: no unbounded growth
                self._layouts.clear()
            layout = self._layouts[key] = packing.Layout.of(treedef, shapes, dtypes)
        return layout

    def _count(self, direction: str, leaves: list, buffers: int) -> None:
        size = sum(getattr(leaf, "nbytes", 0) for leaf in leaves)
        with self._lock:
            counts = self._counts
            setattr(counts, direction, getattr(counts, direction) + 1)
            setattr(counts, f"{direction}_buffers", getattr(counts, f"{direction}_buffers") + buffers)
            setattr(counts, f"{direction}_arrays", getattr(counts, f"{direction}_arrays") + len(leaves))
            setattr(counts, f"{direction}_bytes", getattr(counts, f"{direction}_bytes") + size)


def _on_one_device(leaves: list) -> bool:
    """Whether every leaf is a plain (not a PRNG key) jax.Array on one and the same device: packable together."""
    devices = set()
    for leaf in leaves:
        if not isinstance(leaf, jax.Array) or jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.extended):
            return False
        devices |= leaf.devices()
    return len(devices) == 1


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
