"""Which gymnasium vector env the gym worker steps: the env's native vectorised
implementation, a `SyncVectorEnv` or an `AsyncVectorEnv` (one subprocess per env).

    envs, choice = make_vector_env("CartPole-v1", 64)          # mode "auto"
    print(choice.mode, choice.reason)                          # native: CartPole-v1 has a vector entry point
    envs, choice = make_vector_env("ALE/Pong-v5", 8, "sync")   # forced

"auto" decides from what the worker can measure, never from the env's name:

1. an env whose registration has a `vector_entry_point` (gymnasium 1.x:
   `gym.make_vec(id, n, vectorization_mode="vector_entry_point")`, e.g. CartPole's
   numpy-vectorised class) is stepped natively; for "ALE/..." ids that is ale_py's
   vector env set to `envs.atari`'s preprocessing (`make_atari_vector_env`);
2. otherwise one env is made and stepped for about `PROBE_SECONDS` with random
   actions; when that step's CPU time, spread over the usable cores, saves more than a
   subprocess round trip per env (`ASYNC_OVERHEAD_S`, measured in
   benchmarks/README.md) the envs run in subprocesses (`AsyncVectorEnv`),
   else in this process (`SyncVectorEnv`).

Sync and async envs autoreset on the same step, as the protocol wants; a native
env brings its own autoreset mode (`metadata["autoreset_mode"]`), which
`envs.gym_worker.GymVectorGame` maps onto the protocol. Never imports jax.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import time
from typing import Callable

import gymnasium as gym

from envs.atari import is_atari, make_atari_env, make_atari_vector_env
from seedleague.launch.cpus import usable_cpus as usable_cores  # the CPUs this process may run on

VECTOR_MODES = ("auto", "native", "sync", "async")
PROBE_SECONDS = 0.2  # how long "auto" steps one env to time it
PROBE_MAX_STEPS = 2000
ASYNC_OVERHEAD_S = 1e-4  # a subprocess round trip per env and step (pipe + shared memory); benchmarks/README.md


class UnsupportedEnv(ValueError):
    """The env id cannot be made, or its spaces have no protocol equivalent."""


@dataclasses.dataclass(frozen=True)
class VectorChoice:
    """The vector env the worker built and why (logged at start)."""

    mode: str  # "native", "sync" or "async"
    reason: str


def make_one_fn(env_id: str) -> Callable[[], gym.Env]:
    """A picklable function making one env as the worker steps it (Atari ids get `envs.atari`'s preprocessing)."""
    return functools.partial(make_atari_env if is_atari(env_id) else gym.make, env_id)


def has_native_vector_env(env_id: str) -> bool:
    """True when the env's registration has a vector entry point."""
    if is_atari(env_id):
        try:
            import ale_py
        except ImportError:
            return False  # make_one_fn's env will say what is missing
        gym.register_envs(ale_py)
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        return False
    return spec.vector_entry_point is not None


def probe_step_seconds(make_one: Callable[[], gym.Env], seconds: float = PROBE_SECONDS) -> float:
    """Mean CPU seconds per `step` of one env with random actions, resets excluded.

    CPU time of this thread, not wall-clock: on a machine busy with the host or other
    workers a wall-clock probe would call a fast env slow. (An env that waits on
    I/O rather than computing measures fast here: force `--vector async` for it.)
    """
    env = make_one()
    try:
        env.action_space.seed(0)
        env.reset(seed=0)
        env.step(env.action_space.sample())  # first-call costs (lazy init, caches) are not the step's
        stepping, steps, deadline = 0.0, 0, time.perf_counter() + seconds
        while steps < PROBE_MAX_STEPS and time.perf_counter() < deadline:
            action = env.action_space.sample()
            start = time.thread_time()
            _, _, terminated, truncated, _ = env.step(action)
            stepping += time.thread_time() - start
            steps += 1
            if terminated or truncated:
                env.reset()
        return stepping / max(steps, 1)
    finally:
        env.close()


def choose_mode(num_envs: int, native: bool, step_seconds: Callable[[], float], cores: int) -> VectorChoice:
    """The "auto" decision: native if there is one, else async when subprocesses pay for themselves."""
    if native:
        return VectorChoice("native", "the env has a vector entry point")
    step_s = step_seconds()
    parallel = min(cores, num_envs)
    saved_s = step_s * (1 - 1 / parallel)  # per env and step, if the envs spread over `parallel` cores
    measured = f"one step takes {1e6 * step_s:.0f} us, {cores} usable cores, {num_envs} envs"
    if parallel >= 2 and saved_s > ASYNC_OVERHEAD_S:
        return VectorChoice("async", f"{measured}: subprocesses save {1e6 * saved_s:.0f} us per env step, "
                                     f"more than their {1e6 * ASYNC_OVERHEAD_S:.0f} us round trip")
    return VectorChoice("sync", f"{measured}: subprocesses would not save their {1e6 * ASYNC_OVERHEAD_S:.0f} us "
                                f"round trip per env step")


def make_vector_env(env_id: str, num_envs: int, mode: str = "auto") -> tuple[gym.vector.VectorEnv, VectorChoice]:
    """`num_envs` copies of `env_id` stepped as `mode` says ("auto" measures); raises UnsupportedEnv."""
    if mode not in VECTOR_MODES:
        raise UnsupportedEnv(f"unknown vector mode {mode!r}: choose one of {', '.join(VECTOR_MODES)}")
    if num_envs < 1:
        raise UnsupportedEnv(f"num_envs must be >= 1, got {num_envs}")
    make_one = make_one_fn(env_id)
    native = has_native_vector_env(env_id)
    try:
        if mode == "auto":
            choice = choose_mode(num_envs, native, lambda: probe_step_seconds(make_one), usable_cores())
        elif mode == "native" and not native:
            raise UnsupportedEnv(
                f"{env_id} has no native vector env (its registration has no vector entry point): "
                f"use --vector sync or async"
            )
        else:
            choice = VectorChoice(mode, "forced by the vector mode flag")
        return _build(env_id, num_envs, choice.mode, make_one), choice
    except (gym.error.Error, ImportError) as error:  # ImportError: an env moved or whose package is missing
        raise UnsupportedEnv(f"cannot make {env_id!r}: {error}") from None


def _build(env_id: str, num_envs: int, mode: str, make_one: Callable[[], gym.Env]) -> gym.vector.VectorEnv:
    same_step = gym.vector.AutoresetMode.SAME_STEP
    if mode == "native" and is_atari(env_id):
        return make_atari_vector_env(env_id, num_envs, num_threads=min(num_envs, usable_cores()))
    if mode == "native":
        return gym.make_vec(env_id, num_envs, vectorization_mode="vector_entry_point")
    if mode == "sync":
        return gym.vector.SyncVectorEnv([make_one] * num_envs, copy=False, autoreset_mode=same_step)
    # forkserver: a fork of this process could copy a running gRPC server or client (tests, benchmarks).
    context = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    return gym.vector.AsyncVectorEnv([make_one] * num_envs, copy=False, autoreset_mode=same_step, context=context)


def autoreset_mode(envs: gym.vector.VectorEnv) -> gym.vector.AutoresetMode:
    """The vector env's autoreset mode; gymnasium's default (next step) when it does not say."""
    return gym.vector.AutoresetMode(envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP))

