"""The gym env worker: steps `num_envs` copies of any gymnasium env (Discrete
actions) and lets a seedleague host choose every action.

    python -m envs.gym_worker --address 127.0.0.1:50051 --env CartPole-v1 --num-envs 32
    SEEDLEAGUE_TOKEN=... python -m envs.gym_worker --address host:50051 --tls-ca ca.pem --env CartPole-v1

Data path: vector env (same-step autoreset, as the protocol wants) -> WorkerClient
.step -> host -> actions -> vector env. The worker is deliberately thin: the host
computes episode returns and all learning statistics. On a lost connection it
backs off, reconnects and starts fresh episodes; when the host refuses it, it
exits non-zero with the host's message; SIGTERM/SIGINT stop it cleanly (exit 0).
Never imports jax.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import sys
import threading
from typing import Optional, Sequence

import gymnasium as gym
import numpy as np

from envs.atari import is_atari, make_atari_env
from envs.worker_loop import (
    RateLog,
    WorkerStats,
    add_connection_arguments,
    budget_spent,
    client_config_from_args,
    closed_when_set,
    serve,
    stop_on_signals,
)
from seedleague.protocol import codec
from seedleague.protocol.client import Backoff, ClientConfig, HostRefused, WorkerClient, default_worker_name
from seedleague.protocol.errors import ProtocolError
from seedleague.protocol.specs import EnvSpec
from seedleague.security import ClientSecurity

log = logging.getLogger("envs.gym_worker")


class UnsupportedEnv(ValueError):
    """The env id cannot be made, or its spaces have no protocol equivalent."""


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """One gym worker process: which env, how many copies, which host."""

    env_id: str
    num_envs: int
    address: str
    seed: int = 0
    max_steps: int = 0  # env steps (all envs together) before exiting, rounded up to whole batches; 0 = unlimited
    worker_name: str = dataclasses.field(default_factory=default_worker_name)
    max_message_bytes: int = 64 * 2**20
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0
    connect_timeout_s: float = 10.0
    log_interval_s: float = 10.0  # how often steps/s is logged
    security: ClientSecurity = ClientSecurity()  # token and TLS CA; default plaintext, no token

    def __post_init__(self):
        problems = []
        if not self.env_id:
            problems.append("env_id must name a gymnasium env, e.g. 'CartPole-v1'")
        if self.num_envs < 1:
            problems.append(f"num_envs must be >= 1, got {self.num_envs}")
        if self.max_steps < 0:
            problems.append(f"max_steps must be >= 0 (0 = unlimited), got {self.max_steps}")
        if self.log_interval_s <= 0:
            problems.append(f"log_interval_s must be > 0, got {self.log_interval_s}")
        if problems:
            raise ValueError("bad worker config: " + "; ".join(problems))
        self.client_config()  # Validates the connection fields.

    def client_config(self) -> ClientConfig:
        return ClientConfig(**_connection_fields(self))


def _connection_fields(config) -> dict:
    """The ClientConfig fields (address, backoff, security, ...) of `config`, which has them all."""
    return {field.name: getattr(config, field.name) for field in dataclasses.fields(ClientConfig)}


def make_vector_env(env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    """`num_envs` copies in one process, autoreset on the same step (the protocol's semantics)."""
    make_one = functools.partial(make_atari_env if is_atari(env_id) else gym.make, env_id)
    try:
        return gym.vector.SyncVectorEnv(
            [make_one] * num_envs, copy=False, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )
    except gym.error.Error as error:
        raise UnsupportedEnv(f"cannot make {env_id!r}: {error}") from None


def protocol_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype observations travel as: float64 becomes float32, others must exist in the protocol."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return np.dtype(np.float32)
    try:
        codec.dtype_to_enum(dtype)
    except ProtocolError as error:
        raise UnsupportedEnv(error.message) from None
    return dtype


def env_spec(env_id: str, envs: gym.vector.VectorEnv) -> EnvSpec:
    """The EnvSpec a worker stepping `envs` declares in its handshake (one seat per env)."""
    action_space = envs.single_action_space
    if not isinstance(action_space, gym.spaces.Discrete):
        raise UnsupportedEnv(f"{env_id} has action space {action_space}; the gym worker supports Discrete only")
    observation_space = envs.single_observation_space
    if observation_space.shape is None or observation_space.dtype is None:
        raise UnsupportedEnv(
            f"{env_id} has observation space {observation_space}; wrap it in gymnasium.wrappers.FlattenObservation"
        )
    return EnvSpec(
        env_name=env_id,
        observation_shape=observation_space.shape,
        observation_dtype=protocol_dtype(observation_space.dtype),
        num_actions=int(action_space.n),
        num_envs=envs.num_envs,
        num_seats=1,
    )


def run_worker(config: WorkerConfig, stop: Optional[threading.Event] = None) -> WorkerStats:
    """Step envs for the host until `stop` is set or `max_steps` is reached. Raises HostRefused."""
    stop = stop if stop is not None else threading.Event()
    envs = make_vector_env(config.env_id, config.num_envs)
    try:
        client = WorkerClient(config.client_config(), env_spec(config.env_id, envs))
        with closed_when_set(stop, client):
            return _serve(config, envs, client, stop)
    finally:
        envs.close()


def _serve(
    config: WorkerConfig, envs: gym.vector.VectorEnv, client: WorkerClient, stop: threading.Event
) -> WorkerStats:
    """Connect, step, and on a lost connection back off and start over with fresh episodes."""

    def run_session(stats: WorkerStats, seed: Optional[int], backoff: Backoff) -> None:
        _run_session(config, envs, client, stop, stats, seed, backoff)

    return serve(client, stop, run_session, seed=config.seed, max_steps=config.max_steps, logger=log)


def _run_session(
    config: WorkerConfig,
    envs: gym.vector.VectorEnv,
    client: WorkerClient,
    stop: threading.Event,
    stats: WorkerStats,
    seed: Optional[int],
    backoff: Backoff,
) -> None:
    """The hot loop: observation -> host -> actions -> env step, all envs at once."""
    observation, _ = envs.reset(seed=seed)
    reward = np.zeros(envs.num_envs, np.float32)
    terminated = np.zeros(envs.num_envs, bool)
    truncated = np.zeros(envs.num_envs, bool)
    offset = int(envs.single_action_space.start)
    rate = RateLog(config.log_interval_s, stats.env_steps, log)
    while not stop.is_set() and not budget_spent(config.max_steps, stats):
        actions = client.step(observation, reward, terminated, truncated)[:, 0]
        backoff.reset()
        observation, reward, terminated, truncated, _ = envs.step(actions + offset if offset else actions)
        stats.steps += 1
        stats.env_steps += envs.num_envs
        rate.tick(stats.env_steps, client.policy_version)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's flags; `config_from_args` maps them onto a WorkerConfig."""
    defaults = {f.name: f.default for f in dataclasses.fields(WorkerConfig)}
    parser.add_argument("--address", required=True, help="host address, host:port")
    parser.add_argument("--env", dest="env_id", required=True, help="gymnasium env id, e.g. CartPole-v1 or ALE/Pong-v5")
    parser.add_argument("--num-envs", type=int, default=32, help="env copies stepped together (default 32)")
    parser.add_argument("--seed", type=int, default=defaults["seed"], help="seed of the first reset")
    parser.add_argument(
        "--max-steps", type=int, default=0, help="exit after this many env steps, all envs together (0 = no limit)"
    )
    add_connection_arguments(parser)  # --worker-name, --max-message-bytes, backoff, timeouts, --token, --tls-ca


def config_from_args(args: argparse.Namespace) -> WorkerConfig:
    """WorkerConfig from flags added by `add_arguments`; raises ValueError naming what to change."""
    return WorkerConfig(
        env_id=args.env_id,
        num_envs=args.num_envs,
        seed=args.seed,
        max_steps=args.max_steps,
        log_interval_s=args.log_interval,
        **_connection_fields(client_config_from_args(args)),
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point; returns the exit status (0 done or stopped, 2 refused or unusable env)."""
    parser = argparse.ArgumentParser(prog="python -m envs.gym_worker", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    stop = threading.Event()
    stop_on_signals(stop, log)
    try:
        stats = run_worker(config, stop)
    except (HostRefused, UnsupportedEnv) as error:
        log.error("%s", error)
        return 2
    log.info("stopped: %s", stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
