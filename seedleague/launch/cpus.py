"""The CPUs this process may run on: what a run's worker count (seedleague.launch.run_config) and a worker's
vector-env mode (envs/gym_vector.py) are fitted to. A module of its own so a worker reads it without the host's
configs."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity where the OS reports it, else os.cpu_count()."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
