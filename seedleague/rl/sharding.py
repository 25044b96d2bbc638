"""Where learning and inference run: device choice, the learner mesh, array placement.

This file owns the device side of the learner. `DeviceConfig` says which of a
process's devices learn and which one acts (Podracer's Sebulba split, Hessel et
al. 2021); `DistributedConfig` joins several host processes into one learner
with `jax.distributed`. `make_layout` turns both into a `DeviceLayout`:

    initialize_distributed(DistributedConfig(...))   # before any other JAX call; no-op for one process
    layout = make_layout(DeviceConfig(learner_devices=2, inference_device="separate"), batch_size=32)
    state = place_state(init_train_state(...), layout)          # replicated over the mesh
    update = make_sharded_update(learner_config, network, layout.mesh)   # seedleague.rl.learner
    batch = shard_batch(local_batch, layout.batch_sharding)    # this process's rows, split over its devices
    state, metrics = update(state, batch)                      # gradients averaged by XLA's all-reduce
    params = copy_to_device(state.params, layout.inference_device)  # what inference may keep

The learner is data-parallel over one mesh axis, "batch": the train state is
replicated on every learner device of every process, a batch's leading axis is
split over them. Under `jit` with these shardings the update is the same
global-batch computation as on one device (its losses are means over the whole
batch), and XLA inserts the cross-device reduction of the gradients.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from seedleague.rl.device_config import DeviceConfig, DistributedConfig

log = logging.getLogger(__name__)

BATCH_AXIS = "batch"


def initialize_distributed(config: DistributedConfig) -> None:
    """Join the other processes (`jax.distributed.initialize`); nothing to do for one process.

    Must run before anything initialises a JAX backend in this process. On CPU
    the cross-process collectives use gloo (JAX's default CPU implementation).
    """
    if not config.enabled:
        return
    if jax.distributed.is_initialized():
        if jax.process_count() != config.num_processes or jax.process_index() != config.process_id:
            raise RuntimeError(f"jax.distributed is already initialised as process {jax.process_index()} of "
                               f"{jax.process_count()}, not {config.process_id} of {config.num_processes}")
        return
    try:
        jax.distributed.initialize(config.coordinator, num_processes=config.num_processes,
                                   process_id=config.process_id,
                                   initialization_timeout=config.initialization_timeout_s)
    except RuntimeError as error:
        raise RuntimeError(f"could not join the distributed learner as process {config.process_id} of "
                           f"{config.num_processes} at {config.coordinator}: {error}. jax.distributed must be "
                           "initialised before any JAX computation in the process (create the Host first)") from error
    log.info("joined the distributed learner: process %d of %d, coordinator %s, %d global devices",
             jax.process_index(), jax.process_count(), config.coordinator, jax.device_count())


def split_devices(config: DeviceConfig, devices: Sequence[Any]) -> tuple[tuple[Any, ...], Any]:
    """(learner devices, inference device) chosen from one process's local `devices`.

    Pure: the same config and device list always give the same choice, so every
    process can compute every other process's learner devices.
    """
    count = len(devices)
    if count == 0:
        raise ValueError("no devices to place the learner on")
    choice = config.inference_device
    if choice == "shared":
        free, inference = list(devices), None
    else:
        index = 0 if choice == "separate" else int(choice)
        if count < 2:
            raise ValueError(
                f"devices.inference_device={choice!r} needs 2 or more local devices (one to act, the rest to "
                f"learn), but this process has {count} ({devices[0].platform}): use --devices.inference-device "
                "shared, or on CPU simulate devices with XLA_FLAGS=--xla_force_host_platform_device_count=N")
        if index >= count:
            raise ValueError(f"devices.inference_device={choice!r} but this process's local devices are "
                             f"0..{count - 1}: choose one of those, 'separate' or 'shared'")
        inference = devices[index]
        free = [d for i, d in enumerate(devices) if i != index]
    wanted = config.learner_devices or len(free)
    if wanted > len(free):
        spare = "" if inference is None else f", {count - len(free)} kept for inference"
        raise ValueError(f"devices.learner_devices={wanted} but only {len(free)} local devices are free for the "
                         f"learner ({count} in all{spare}): lower --devices.learner-devices (0 takes all free ones)")
    learner = tuple(free[:wanted])
    return learner, (learner[0] if inference is None else inference)


@dataclasses.dataclass(frozen=True)
class DeviceLayout:
    """The resolved device plan of one process (see `make_layout`)."""

    mesh: Mesh  # the learner devices of every process, one axis "batch", process by process
    local_learner_devices: tuple[Any, ...]  # this process's share of the mesh
    inference_device: Any  # where this process's forward passes run

    @property
    def replicated(self) -> NamedSharding:
        """Sharding of the train state: a full copy on every learner device."""
        return replicated(self.mesh)

    @property
    def batch_sharding(self) -> NamedSharding:
        """Sharding of a batch: its leading axis split over the learner devices."""
        return batch_sharded(self.mesh)

    @property
    def num_learner_devices(self) -> int:
        return self.mesh.size

    @property
    def multi_process(self) -> bool:
        return not self.replicated.is_fully_addressable

    @property
    def trivial(self) -> bool:
        """One learner device that also runs inference: placement changes nothing."""
        return self.mesh.size == 1 and self.inference_device == self.local_learner_devices[0]

    def describe(self) -> str:
        local = ",".join(str(d.id) for d in self.local_learner_devices)
        split = "shared" if self.inference_device in self.local_learner_devices else "separate"
        return (f"learner on {self.mesh.size} device(s) (here: {local}), inference on device "
                f"{self.inference_device.id} ({split})")


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharded(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(BATCH_AXIS))


def make_layout(config: DeviceConfig, batch_size: Optional[int] = None) -> DeviceLayout:
    """The mesh over every process's learner devices and this process's inference device.

    `batch_size` (this process's rows per update), when given, must split evenly
    over this process's learner devices.
    """
    learners = []
    for process in range(jax.process_count()):
        learner, inference = split_devices(config, jax.local_devices(process_index=process))
        learners.extend(learner)
        if process == jax.process_index():
            local_learner, local_inference = learner, inference
    if batch_size is not None and batch_size % len(local_learner):
        multiple = -(-batch_size // len(local_learner)) * len(local_learner)
        raise ValueError(
            f"batch_size {batch_size} does not split evenly over this process's {len(local_learner)} learner "
            f"devices: use a multiple of {len(local_learner)} (e.g. --batch-size {multiple}) or change "
            "--devices.learner-devices")
    mesh = Mesh(np.array(learners), (BATCH_AXIS,))
    return DeviceLayout(mesh, tuple(local_learner), local_inference)


def place_state(state: Any, layout: DeviceLayout) -> Any:
    """`state` (identical on every process) replicated over the learner mesh.

    With several processes, process 0's values are broadcast first, so the
    learner starts from one set of params whatever each process initialised.
    """
    if not layout.multi_process:
        return jax.device_put(state, layout.replicated)
    return _replicate_from_process_0(state, layout.replicated)


def _replicate_from_process_0(tree: Any, sharding: NamedSharding) -> Any:
    """Process 0's value of every leaf as a global array replicated over `sharding` (a collective)."""
    from jax.experimental import multihost_utils

    keys = jax.tree.map(_is_key, tree)
    raw = jax.tree.map(lambda x, k: jax.random.key_data(x) if k else x, tree, keys)
    raw = multihost_utils.broadcast_one_to_all(jax.tree.map(lambda x: np.asarray(local_value(x)), raw))
    out = jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x, x.shape), raw)

    def rewrap(x, template, is_key):
        if not is_key:
            return x
        wrap = functools.partial(jax.random.wrap_key_data, impl=jax.random.key_impl(template))
        return jax.jit(wrap, out_shardings=sharding)(x)

    return jax.tree.map(rewrap, out, tree, keys)


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def shard_batch(local: Any, sharding: NamedSharding) -> Any:
    """This process's batch (leading axis: its rows) as global arrays split over the mesh.

    With one process this is a `device_put`; with several, each process's rows
    become its slice of the global batch (`jax.make_array_from_process_local_data`).
    """
    if sharding.is_fully_addressable:
        return jax.device_put(local, sharding)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), local)


def local_value(x: Any) -> Any:
    """A replicated (possibly multi-process) array's value as a single-device array on this process."""
    return x.addressable_data(0) if isinstance(x, jax.Array) and not x.is_fully_addressable else x


def copy_to_device(tree: Any, device: Any) -> Any:
    """A fresh copy of replicated arrays on `device`, never aliasing the source buffers.

    The learner's update donates its state, so inference must hold its own copy.
    """
    def source(x):  # one full replica, on `device` when there is one there
        if not isinstance(x, jax.Array) or len(x.sharding.device_set) == 1:
            return x
        here = [s.data for s in x.addressable_shards if s.device == device]
        return here[0] if here else x.addressable_data(0)

    return jax.device_put(jax.tree.map(source, tree), device, may_alias=False)  # one batched transfer


def portable(tree: Any) -> Any:
    """`tree` as a checkpoint should hold it: on this process's first device when it is one process.

    Orbax records the devices an array was saved from, and a checkpoint of arrays
    on devices 1 and 2 does not load where those devices do not exist unless the
    reader passes shardings. Across processes the arrays stay global: saving them
    is a collective write.
    """
    leaves = [x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)]
    if any(not x.is_fully_addressable for x in leaves):
        return tree
    return jax.device_put(tree, jax.local_devices()[0])
