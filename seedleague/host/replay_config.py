"""ReplayConfig: size, sampling and rate limiting of the unroll replay, checked when made.

Kept apart from seedleague.host.replay, which holds the unrolls on the device with jax, so that building the command
line (`seedleague train --help`, a refused flag) needs no jax.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """Size, sampling and rate limiting of the unroll replay."""

    capacity: int = 1024  # unrolls kept on device
    samples_per_insert: float = 1.0  # average times each unroll is trained on
    min_size: int = 0  # unrolls needed before the first sample (0: one learner batch)
    error_buffer: float = 0.0  # slack around the target ratio, in samples (0: batch_size * max(1, spi))
    sampler: str = "fifo"  # "fifo": oldest unsampled first; "uniform": uniform over the buffer
    # while no fresh batch is ready, train the newest one again (seedleague.host.data_reuse): "auto" where the learner
    # is on an accelerator, whose idle time nothing else uses; "on"; "off"
    reuse_when_idle: str = "auto"
    max_passes: int = 0  # most updates on one batch, its first included (0: as many as keep its epochs <= 10)

    def __post_init__(self):
        if self.capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {self.capacity}")
        if self.samples_per_insert <= 0:
            raise ValueError(f"replay samples_per_insert must be > 0, got {self.samples_per_insert}")
        if self.min_size < 0 or self.error_buffer < 0:
            raise ValueError("replay min_size and error_buffer must be >= 0")
        if self.sampler not in ("fifo", "uniform"):
            raise ValueError(f"replay sampler must be 'fifo' or 'uniform', got {self.sampler!r}")
        if self.sampler == "fifo" and self.samples_per_insert > 1:
            raise ValueError("the fifo sampler reads each unroll once: use samples_per_insert <= 1 or sampler='uniform'")
        if self.reuse_when_idle not in ("auto", "on", "off"):
            raise ValueError(f"replay reuse_when_idle must be 'auto', 'on' or 'off', got {self.reuse_when_idle!r}")
        if self.max_passes < 0:
            raise ValueError(f"replay max_passes must be >= 0 (0: as many as keep a batch's epochs <= 10), "
                             f"got {self.max_passes}")

    def error_buffer_for(self, batch_size: int) -> float:
        """The limiter's slack for a learner sampling `batch_size` unrolls at a time; ValueError where an explicit
        one is too narrow to let the run go on. Inserts stop once the ratio's diff passes min_size * spi +
        error_buffer, and a sample needs it at least batch_size above min_size * spi - error_buffer: unless
        2 * error_buffer >= batch_size + spi, both can wait on each other for ever (0.5 with batches of 8 did)."""
        if not self.error_buffer:
            return batch_size * max(1.0, self.samples_per_insert)
        narrowest = (batch_size + self.samples_per_insert) / 2
        if self.error_buffer < narrowest:
            raise ValueError(f"replay error_buffer {self.error_buffer:g} is too narrow for batches of {batch_size} "
                             f"unrolls at samples_per_insert {self.samples_per_insert:g}: the workers would wait for "
                             "the learner and the learner for more unrolls, for ever. Use at least "
                             f"{narrowest:g} (half a batch plus half a sample per insert), or 0 for the default "
                             f"({batch_size * max(1.0, self.samples_per_insert):g})")
        return self.error_buffer
