"""DeviceConfig and DistributedConfig: which devices learn and act, and which processes form one learner.

Kept apart from seedleague.rl.sharding, which places arrays with jax, so that building the command line
(`seedleague train --help`, a refused flag) needs no jax.
"""

from __future__ import annotations

import dataclasses


_INFERENCE_CHOICES = ("shared", "separate")


@dataclasses.dataclass(frozen=True)
class DeviceConfig:
    """Which of this process's local devices learn and which one runs inference.

    learner_devices: how many local devices the learner is data-parallel over;
        0 takes every local device that inference does not. The host's
        batch_size must be a multiple of this count (each device gets an equal
        share of every batch).
    inference_device: where the batched forward passes run.
        "shared": on the first learner device (one accelerator does both; the
            default, and the only choice with one device).
        "separate": on local device 0, with the learner on the devices after
            it (Sebulba's actor/learner split: acting never waits for a
            gradient step on the same device).
        "<i>" (a local device index, e.g. "3"): on that device, with the
            learner on the others, in order.
    One batcher thread feeds inference, so it uses one device.
    """

    learner_devices: int = 0
    inference_device: str = "shared"

    def __post_init__(self):
        if self.learner_devices < 0:
            raise ValueError(f"devices.learner_devices must be >= 0 (0: every local device inference does not "
                             f"use), got {self.learner_devices}")
        if self.inference_device not in _INFERENCE_CHOICES and not self.inference_device.isdigit():
            raise ValueError(f"devices.inference_device must be 'shared', 'separate' or a local device index "
                             f"such as '1', got {self.inference_device!r}")


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """Several host processes forming one data-parallel learner (`jax.distributed`).

    Every process runs its own host, env workers and replay; each update takes
    one batch_size batch from every process, so the global batch is
    num_processes x batch_size, and every process ends each update with the same
    params. Start every process with the same flags except process_id.
    coordinator: "host:port" where process 0 serves JAX's coordination service
        ("" with one process).
    num_processes: how many host processes form the learner (1: no jax.distributed).
    process_id: this process's index, 0 .. num_processes - 1.
    initialization_timeout_s: how long to wait for every process to join.
    """

    coordinator: str = ""
    num_processes: int = 1
    process_id: int = 0
    initialization_timeout_s: int = 300

    def __post_init__(self):
        if self.num_processes < 1:
            raise ValueError(f"distributed.num_processes must be >= 1, got {self.num_processes}")
        if not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"distributed.process_id must be in 0..{self.num_processes - 1} "
                             f"(distributed.num_processes is {self.num_processes}), got {self.process_id}")
        if self.num_processes > 1 and not _is_host_port(self.coordinator):
            raise ValueError(f"distributed.num_processes is {self.num_processes}: give every process "
                             f"--distributed.coordinator HOST:PORT (process 0's address), got {self.coordinator!r}")
        if self.num_processes == 1 and self.coordinator:
            raise ValueError(f"distributed.coordinator is {self.coordinator!r} but distributed.num_processes is 1: "
                             "set --distributed.num-processes to the number of host processes, or drop the coordinator")
        if self.initialization_timeout_s < 1:
            raise ValueError(f"distributed.initialization_timeout_s must be >= 1, got {self.initialization_timeout_s}")

    @property
    def enabled(self) -> bool:
        return self.num_processes > 1


def _is_host_port(address: str) -> bool:
    host, _, port = address.rpartition(":")
    return bool(host) and port.isdigit()
