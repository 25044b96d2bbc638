"""One byte buffer for a whole tree of arrays: how the host copies a batch to an accelerator, and its outputs
back, as one transfer each way.

`jax.device_put` of a tree makes one copy per leaf (its own allocation and DMA on a GPU), and `jax.device_get`
one per output: a forward pass's observation, first, core state and legal mask in, its action, logits and core
state out. Packed, the host writes every leaf's bytes into one buffer, copies that, and one jitted function
slices and bitcasts the leaves back out on the device; the way back concatenates the outputs' bytes on the
device and the host reads its leaves as views of the one buffer it fetched.

`Layout` is the plan (each leaf's shape, dtype and byte offset) for trees of one structure and shapes; the
host keeps one per shape it meets (inference batches are padded to a few bucket sizes, see
seedleague.buckets). `pack` and `unpack` run inside the jitted function that uses the leaves
(seedleague.host.transfers `Transfers.call`), so the buffers cost no extra dispatch.

Packing pays where a copy's fixed cost dominates, many small arrays, and cost time on an Atari-sized
observation batch (benchmarks/README.md, "One buffer each way"), so `Transfers.call` packs only inputs whose
leaves are all under `LARGE_LEAF_BYTES`. Leaves start on `ALIGNMENT`-byte boundaries.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

ALIGNMENT = 16  # bytes: every leaf starts at a multiple (vector loads on both sides)
LARGE_LEAF_BYTES = 256 * 1024  # inputs with a leaf this large are not packed (see the module docstring)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each leaf of a tree lies in its packed buffer."""

    treedef: Any
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[np.dtype, ...]
    offsets: tuple[int, ...]  # bytes from the buffer's start
    size: int  # the buffer's length in bytes

    @classmethod
    def of(cls, treedef: Any, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[np.dtype]) -> Layout:
        offsets, size = [], 0
        for shape, dtype in zip(shapes, dtypes):
            offsets.append(size)
            size += -(-_nbytes(shape, dtype) // ALIGNMENT) * ALIGNMENT
        return cls(treedef, tuple(map(tuple, shapes)), tuple(map(np.dtype, dtypes)), tuple(offsets), size)

    @classmethod
    def of_tree(cls, tree: Any) -> Layout:
        """The layout of `tree`'s leaves (arrays, or anything with a shape and dtype such as a traced value)."""
        leaves, treedef = jax.tree.flatten(tree)
        return cls.of(treedef, [leaf.shape for leaf in leaves], [leaf.dtype for leaf in leaves])

    def nbytes(self, index: int) -> int:
        return _nbytes(self.shapes[index], self.dtypes[index])

    @functools.cached_property  # read per batch by the counts
    def payload(self) -> int:
        """The leaves' bytes, without the alignment padding."""
        return sum(_nbytes(shape, dtype) for shape, dtype in zip(self.shapes, self.dtypes))


def _nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def host_leaves(tree: Any) -> tuple[list[np.ndarray], Any]:
    """`tree`'s leaves as numpy arrays of the dtypes JAX would give them (float64 becomes float32 unless x64 is
    on, as `jax.device_put` would make it), and its treedef."""
    leaves, treedef = jax.tree.flatten(tree)
    arrays = []
    for leaf in leaves:
        array = np.asarray(leaf)
        arrays.append(array.astype(jax.dtypes.canonicalize_dtype(array.dtype), copy=False))
    return arrays, treedef


def pack_on_host(layout: Layout, leaves: Sequence[np.ndarray]) -> np.ndarray:
    """`leaves` (matching `layout`) written into one new uint8 buffer [layout.size], alignment gaps zeroed."""
    buffer, end = np.empty(layout.size, np.uint8), 0
    for index, (leaf, offset) in enumerate(zip(leaves, layout.offsets)):
        buffer[end:offset] = 0
        end = offset + layout.nbytes(index)
        buffer[offset:end] = np.ascontiguousarray(leaf).reshape(-1).view(np.uint8)
    buffer[end:] = 0
    return buffer


def unpack_on_host(layout: Layout, buffer: np.ndarray) -> Any:
    """The tree whose packed bytes are `buffer`; its leaves are views of it, no copies."""
    leaves = [buffer[offset:offset + layout.nbytes(index)].view(dtype).reshape(shape)
              for index, (shape, dtype, offset) in enumerate(zip(layout.shapes, layout.dtypes, layout.offsets))]
    return jax.tree.unflatten(layout.treedef, leaves)


def _from_bytes(raw: jax.Array, shape: tuple[int, ...], dtype: np.dtype) -> jax.Array:
    """uint8 [n] as a `dtype` array of `shape` (the same bytes)."""
    if dtype == np.bool_:
        return (raw != 0).reshape(shape)
    if dtype.itemsize == 1:
        return jax.lax.bitcast_convert_type(raw, dtype).reshape(shape)
    return jax.lax.bitcast_convert_type(raw.reshape(-1, dtype.itemsize), dtype).reshape(shape)


def _to_bytes(leaf: jax.Array) -> jax.Array:
    """`leaf`'s bytes as uint8 [n] (bool as one byte, 0 or 1, as numpy stores it)."""
    if leaf.dtype == jnp.bool_:
        return leaf.astype(jnp.uint8).reshape(-1)
    return jax.lax.bitcast_convert_type(leaf, jnp.uint8).reshape(-1)


def unpack(layout: Layout, buffer: jax.Array) -> Any:
    """In a jitted function: the tree whose packed bytes are `buffer` (uint8 [layout.size])."""
    leaves = [_from_bytes(buffer[offset:offset + layout.nbytes(index)], shape, dtype)
              for index, (shape, dtype, offset) in enumerate(zip(layout.shapes, layout.dtypes, layout.offsets))]
    return jax.tree.unflatten(layout.treedef, leaves)


def pack(tree: Any) -> jax.Array:
    """In a jitted function: `tree`'s leaves packed into one uint8 buffer, as `Layout.of_tree(tree)` places them
    (alignment gaps zeroed, as `pack_on_host` leaves them)."""
    layout, pieces, end = Layout.of_tree(tree), [], 0
    for index, (leaf, offset) in enumerate(zip(jax.tree.leaves(tree), layout.offsets)):
        pieces += [jnp.zeros(offset - end, jnp.uint8), _to_bytes(leaf)]
        end = offset + layout.nbytes(index)
    pieces.append(jnp.zeros(layout.size - end, jnp.uint8))
    return jnp.concatenate(pieces)
