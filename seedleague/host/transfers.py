"""The host's copies between its memory and the accelerator: explicit, one per batch each way, and counted.

A jitted function given numpy arguments copies each one to the device on its own, and `np.asarray` on each
output copies it back on its own: an inference batch of observation, first, core state and legal mask would
cost four copies in and three out, each a separate launch on a GPU. The host's hot paths (the forward pass,
the replay's insert and sample) instead hand the whole batch, as one pytree, to `Transfers.to_device`, and
fetch every output with one `Transfers.to_host`, or run the whole pass through `Transfers.call`, which on an
accelerator packs a batch of small arrays into one byte buffer each way (seedleague.host.packing): one copy
each way per batch, whatever the number of arrays. The counts say so in benchmarks (benchmarks/gpu_pong.py
prints them), and under `jax.transfer_guard("disallow")` any copy made any other way raises, which is how the
tests check that none is.

On a CPU device the device's memory is the host's, and `jax.device_put`'s Python dispatch per leaf is the cost
(benchmarks/README.md, "The host's copies on a CPU"). There `to_device` hands the numpy tree to one jitted identity
instead: still one explicit, counted call, the copy made by XLA's C++ argument handling; `call` hands the numpy
inputs to its own jitted call, which copies them the same way (one dispatch per forward pass, not two). Either way
the arrays handed over are the device's from then on: on a CPU the copy may alias or still be reading them, so the
caller must not write to them afterwards (the host hands over fresh arrays only).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, Callable, Hashable, Optional

import jax
import numpy as np

from seedleague.host import packing
from seedleague.rl import xla_cpu

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
    to_device_buffers: int = 0  # the copies made: one per packed call, else one per array
    to_host_buffers: int = 0


class Transfers:
    """Counts every copy its owner makes between host memory and `device`."""

    def __init__(self, device: Optional[jax.Device] = None, packed: Optional[bool] = None):
        """`device`: where `to_device` puts arrays (None: JAX's default device). `packed`: `call` copies its
        inputs and outputs as one byte buffer each way (None: exactly when `device` is not a CPU, whose copies are
        not DMAs)."""
        self.device = device
        self.packed = not is_cpu(device) if packed is None else packed
        self._counts = TransferCounts()
        self._lock = threading.Lock()
        self._host_memory_copy = _host_memory_copy(device)  # None: not a CPU device
        self._layouts: dict[tuple, packing.Layout] = {}  # by tree structure, shapes and dtypes
        self._returned: dict[tuple, packing.Layout] = {}  # `call`'s outputs, by function, settings and input layout
        self._fusions_off: dict[tuple, bool] = {}  # `call`'s compile choice, by function and settings

    def to_device(self, tree: Any) -> Any:
        """`tree` (numpy arrays, or anything `jax.device_put` takes) on the device, in one call; the caller must not
        write to its arrays afterwards (see the module docstring)."""
        leaves = jax.tree.leaves(tree)
        self._count_leaves("to_device", leaves)
        if self._in_host_memory(leaves):
            with jax.transfer_guard_host_to_device("allow"):  # the explicit copy, made by the jitted call
                return self._host_memory_copy(tree)
        return jax.device_put(tree, self.device)

    def _in_host_memory(self, leaves: list) -> bool:
        """Whether `leaves` are all numpy and the device is a CPU: then a jitted call's argument handling copies
        them, in C++ (see the module docstring)."""
        return self._host_memory_copy is not None and all(isinstance(leaf, (np.ndarray, np.generic)) for leaf in leaves)

    def to_host(self, tree: Any) -> Any:
        """`tree`'s device arrays as numpy arrays, fetched in one call."""
        self._count_leaves("to_host", jax.tree.leaves(tree))
        return jax.device_get(tree)

    def call(self, fn: Callable, on_device: tuple, inputs: Any, donate: bool = False, **settings: Hashable
             ) -> tuple[Any, Any]:
        """`fn(on_device, inputs, **settings) -> (outputs, kept)`, jitted, with `inputs` (numpy, from the host)
        copied in and `outputs` copied back as numpy (none when it has no arrays); `on_device` (params, keys) and
        `kept` stay on the device, and `donate` gives `on_device`'s buffers to `kept`. `fn` is a module-level
        function and `settings` its hashable static settings. Packed (an accelerator, and inputs of small arrays
        only: seedleague.host.packing), the inputs' unpacking and the outputs' packing run inside the same jitted
        call as `fn`, so one buffer each way costs no extra dispatch; then `outputs`' shapes must follow from
        `inputs`' shapes and `settings` alone."""
        static = tuple(sorted(settings.items()))
        arrays, treedef = packing.host_leaves(inputs) if self.packed else ([], None)
        if not (arrays and all(array.nbytes < packing.LARGE_LEAF_BYTES for array in arrays)):
            outputs, kept = self._call_unpacked(fn, static, on_device, inputs, donate)
            return (self.to_host(outputs) if jax.tree.leaves(outputs) else outputs), kept
        layout = self._layout(treedef, arrays)
        self._count("to_device", len(arrays), layout.payload, buffers=1)
        buffer = jax.device_put(packing.pack_on_host(layout, arrays), self.device)
        call = _jitted(True, donate, self._library_fusions_off(fn, static, on_device, buffer, layout))
        packed, kept = call(fn, static, layout, on_device, buffer)
        returned = self._returned_layout(fn, settings, static, layout, on_device, buffer)
        if not returned.shapes:  # nothing to fetch
            return jax.tree.unflatten(returned.treedef, []), kept
        return self.fetch_packed(returned, packed, fn.__name__), kept

    def _call_unpacked(self, fn: Callable, static: tuple, on_device: tuple, inputs: Any, donate: bool
                       ) -> tuple[Any, Any]:
        """`fn` jitted on `inputs` copied in as they are. On a CPU device numpy inputs go straight into the jitted
        call, whose argument handling makes the copy `to_device`'s jitted identity would (counted as one): one
        dispatch per pass, not two."""
        leaves = jax.tree.leaves(inputs)
        call = _jitted(False, donate, self._library_fusions_off(fn, static, on_device, inputs))
        if not self._in_host_memory(leaves):
            return call(fn, static, on_device, self.to_device(inputs))
        self._count_leaves("to_device", leaves)
        with jax.transfer_guard_host_to_device("allow"):  # the explicit copy, made by the call's argument handling
            return call(fn, static, on_device, inputs)

    def _library_fusions_off(self, fn: Callable, static: tuple, on_device: tuple, inputs: Any,
                             layout: Optional[packing.Layout] = None) -> bool:
        """Whether `fn` with `static` compiles with XLA:CPU's library fusions off: on a CPU, where it convolves
        (seedleague.rl.xla_cpu; an MLP's pass is faster with them). Traced once per function and settings."""
        key = (fn, static)
        off = self._fusions_off.get(key)
        if off is None:
            traced = functools.partial(_call, fn, static) if layout is None else functools.partial(
                _call_packed, fn, static, layout)
            off = bool(is_cpu(self.device) and xla_cpu.library_fusions_off()
                       and xla_cpu.convolves(traced, on_device, inputs))
            self._fusions_off[key] = off
        return off

    def fetch_packed(self, layout: packing.Layout, buffer: jax.Array, source: str) -> Any:
        """The tree of `layout` from `buffer`, `source`'s `packing.pack` of it on the device (made inside its own
        jitted call, as `call` does): one copy, counted as that tree's arrays. A buffer of another size (outputs
        shaped by what stayed on the device, against `layout`, traced from the inputs) is refused."""
        self._count("to_host", len(layout.shapes), layout.payload, buffers=1)
        packed = np.asarray(jax.device_get(buffer))
        if packed.size != layout.size:
            raise ValueError(f"{source} returned {packed.size} packed bytes where inputs of these shapes gave "
                             f"{layout.size}: its outputs' shapes must follow from its inputs' alone")
        return packing.unpack_on_host(layout, packed)

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
                self._returned.clear()
            layout = self._layouts[key] = packing.Layout.of(treedef, shapes, dtypes)
        return layout

    def _returned_layout(self, fn: Callable, settings: dict, static: tuple, layout: packing.Layout,
                         on_device: tuple, buffer: jax.Array) -> packing.Layout:
        """The layout of `fn`'s outputs for inputs of `layout` (traced once, without running)."""
        key = (fn, static, layout)
        returned = self._returned.get(key)
        if returned is None:
            shapes = jax.eval_shape(lambda kept, raw: fn(kept, packing.unpack(layout, raw), **settings)[0],
                                    on_device, buffer)
            returned = self._returned[key] = packing.Layout.of_tree(shapes)
        return returned

    def _count_leaves(self, direction: str, leaves: list) -> None:
        self._count(direction, len(leaves), sum(getattr(leaf, "nbytes", 0) for leaf in leaves), buffers=len(leaves))

    def _count(self, direction: str, arrays: int, nbytes: int, buffers: int) -> None:
        with self._lock:
            counts = self._counts
            setattr(counts, direction, getattr(counts, direction) + 1)
            setattr(counts, f"{direction}_arrays", getattr(counts, f"{direction}_arrays") + arrays)
            setattr(counts, f"{direction}_bytes", getattr(counts, f"{direction}_bytes") + nbytes)
            setattr(counts, f"{direction}_buffers", getattr(counts, f"{direction}_buffers") + buffers)


def _call(fn: Callable, static: tuple, on_device: tuple, inputs: Any) -> tuple[Any, Any]:
    return fn(on_device, inputs, **dict(static))


def _call_packed(fn: Callable, static: tuple, layout: packing.Layout, on_device: tuple, buffer: jax.Array
                 ) -> tuple[jax.Array, Any]:
    outputs, kept = fn(on_device, packing.unpack(layout, buffer), **dict(static))
    return packing.pack(outputs), kept


@functools.cache
def _jitted(packed: bool, donate: bool, library_fusions_off: bool) -> Callable:
    """`Transfers.call`'s jitted `_call_packed` or `_call`, donating `on_device` or not, compiled with XLA:CPU's
    library fusions off or not (seedleague.rl.xla_cpu)."""
    return jax.jit(_call_packed if packed else _call,
                   static_argnames=("fn", "static", "layout") if packed else ("fn", "static"),
                   donate_argnames=("on_device",) if donate else (),
                   compiler_options=xla_cpu.library_fusions_off() if library_fusions_off else None)


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
