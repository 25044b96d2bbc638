"""The gym env worker: steps `num_envs` copies of any gymnasium env and lets a
seedleague host choose every action. A Box observation with a Discrete action speaks
protocol v1 as it always has; Dict observations and Box, MultiDiscrete, Tuple or Dict
actions speak protocol v2 (named tensors and action heads, `envs.gym_spaces`), and
send the final observation of every truncated episode.

    python -m envs.gym_worker --address 127.0.0.1:50051 --env CartPole-v1 --num-envs 64
    python -m envs.gym_worker --address 127.0.0.1:50051 --env ALE/Pong-v5 --num-envs 8 --vector async
    SEEDLEAGUE_TOKEN=... python -m envs.gym_worker --address host:50051 --tls-ca ca.pem --env CartPole-v1

`GymVectorGame` wraps a gymnasium vector env as a `worker_loop.VectorGame`, and
`worker_loop.run_game_worker` runs it: handshake, lockstep steps, reconnects with
fresh episodes, SIGTERM/SIGINT (exit 0), refusals (exit 2). Which vector env
(native, sync or async) is `envs.gym_vector`'s choice, logged at start; `--vector`
forces one. The host computes episode returns and all learning statistics.

Episode boundaries reach the host as the protocol says (docs/protocol.md section 5)
whatever the vector env's autoreset mode:

- same step (sync and async envs): the message with the done flag carries the final
  reward and already the next episode's first observation; passed through as is;
- disabled: the ended envs are reset at once (`reset_mask`), giving the same;
- next step (gymnasium's default, e.g. CartPole's native vector env): the env
  reports its final observation with the done flag and restarts on the following
  step, ignoring that step's action. The message with the done flag carries the
  final reward and the final observation with `acting` false for that env; the
  next message carries the first observation of the new episode, reward 0, and
  `acting` true. The host starts the new episode at that acting row (the unroll
  store marks it `first`), so every acted step of every episode is recorded once.
  The restart costs one env slot per episode.

Never imports jax.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import threading
from typing import Optional, Sequence

import gymnasium as gym
import numpy as np

from envs.gym_spaces import NamedSpaces, protocol_dtype
from envs.gym_vector import VECTOR_MODES, UnsupportedEnv, VectorChoice, autoreset_mode, make_vector_env
from envs.worker_loop import (
    GameStep,
    GameWorkerConfig,
    WorkerStats,
    add_game_worker_arguments,
    game_worker_main,
    positive_int,
    run_game_worker,
    head_actions,
)
from seedleague.protocol.named import NamedEnvSpec
from seedleague.rl.named_spec import flat_specs

log = logging.getLogger("envs.gym_worker")

__all__ = ["GymVectorGame", "UnsupportedEnv", "WorkerConfig", "env_spec", "make_gym_game", "run_worker"]


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """One gym worker process: which env, how many copies, how they are vectorised, and the loop around them."""

    env_id: str  # gymnasium env id, e.g. "CartPole-v1" or "ALE/Pong-v5"
    num_envs: int  # env copies stepped together, one message per step
    loop: GameWorkerConfig  # the host's address and connection (ClientConfig), seed, max_steps, log interval
    vector: str = "auto"  # "auto" (measured, envs.gym_vector), "native", "sync" or "async"

    def __post_init__(self):
        problems = []
        if not self.env_id:
            problems.append("env_id must name a gymnasium env, e.g. 'CartPole-v1'")
        if self.num_envs < 1:
            problems.append(f"num_envs must be >= 1, got {self.num_envs}")
        if self.vector not in VECTOR_MODES:
            problems.append(f"vector must be one of {', '.join(VECTOR_MODES)}, got {self.vector!r}")
        if not isinstance(self.loop, GameWorkerConfig):
            problems.append(f"loop must be a GameWorkerConfig, got {type(self.loop).__name__}")
        if problems:
            raise ValueError("bad worker config: " + "; ".join(problems))


def env_spec(env_id: str, envs: gym.vector.VectorEnv) -> NamedEnvSpec:
    """The spec a worker stepping `envs` (a Box observation, a Discrete action) declares in its handshake (one seat
    per env): v1's form, one tensor "observation" and one discrete head "action", which v1 carries on the wire."""
    action_space = envs.single_action_space
    if not isinstance(action_space, gym.spaces.Discrete):
        raise UnsupportedEnv(f"{env_id} has action space {action_space}; a protocol v1 spec takes Discrete only "
                             "(GymVectorGame declares a v2 spec for other spaces: envs.gym_spaces)")
    observation_space = envs.single_observation_space
    if observation_space.shape is None or observation_space.dtype is None:
        raise UnsupportedEnv(
            f"{env_id} has observation space {observation_space}; wrap it in gymnasium.wrappers.FlattenObservation"
        )
    observation, action = flat_specs(tuple(observation_space.shape), protocol_dtype(observation_space.dtype),
                                   int(action_space.n), False)
    return NamedEnvSpec(env_id, observation, action, envs.num_envs)


class GymVectorGame:
    """A gymnasium vector env as a `worker_loop.VectorGame` with one seat per env.

        game = make_gym_game("CartPole-v1", num_envs=64)     # or GymVectorGame("CartPole-v1", envs)
        step = game.reset(seed=0)          # GameStep: observation {"observation": [E, 1, 4]}, reward [E, 1], flags [E]
        step = game.step({"action": a})    # a [E, 1] int in [0, n)

    The returned arrays are views of the vector env's buffers, overwritten by the
    next call. Any autoreset mode maps onto the protocol (module docstring).
    Raises UnsupportedEnv for spaces the protocol cannot carry.
    """

    def __init__(self, env_id: str, envs: gym.vector.VectorEnv, choice: Optional[VectorChoice] = None,
                 protocol: int = 0):
        """`protocol`: 0 speaks v1 where v1 carries the spaces (a Box observation, a Discrete action), else v2;
        2 speaks v2 always (a v1-shaped v2 spec, e.g. to measure the v2 path's cost)."""
        self.envs = envs
        self.choice = choice
        self.spaces = NamedSpaces.of(env_id, envs, force=protocol == 2)  # None: speaks v1
        self.spec = env_spec(env_id, envs) if self.spaces is None else self.spaces.spec
        self.protocol = 1 if self.spaces is None else 2  # spoken on the wire: v1 where it carries the spaces
        self.autoreset = autoreset_mode(envs)
        num_envs = envs.num_envs
        self._offset = int(envs.single_action_space.start) if self.spaces is None else 0
        next_step = self.autoreset == gym.vector.AutoresetMode.NEXT_STEP
        self._acting = np.ones((num_envs, 1), bool) if next_step else None  # False: restarting, action ignored
        self._no_reward = np.zeros(num_envs, np.float32)
        self._not_ended = np.zeros(num_envs, bool)
        self.episodes = 0  # episodes ended (terminated or truncated), over all envs

    def reset(self, seed: Optional[int] = None) -> GameStep:
        """Fresh episodes in every env; `seed` seeds them (sync and async: env e gets seed + e)."""
        observation, _ = self.envs.reset(seed=seed)
        if self._acting is not None:
            self._acting.fill(True)
        return self._game_step(observation, self._no_reward, self._not_ended, self._not_ended)

    def step(self, actions: dict) -> GameStep:
        """Apply `actions` {head: [E, 1, ...]} (Box + Discrete: {"action": [E, 1]}); ended envs restart as the
        autoreset mode allows (module docstring)."""
        if self.spaces is not None:
            return self._step_named(actions)
        chosen = head_actions(actions, self.spec)[:, 0]
        if self._acting is not None:  # a restarting env ignores its action: keep it in range all the same
            chosen = np.where(self._acting[:, 0], chosen, 0)
        observation, reward, terminated, truncated, _ = self.envs.step(chosen + self._offset if self._offset else chosen)
        ended = terminated | truncated
        if ended.any():
            self.episodes += int(ended.sum())
            if self.autoreset == gym.vector.AutoresetMode.DISABLED:
                # reset() clears the env's own flag buffers, which may be the arrays we were given.
                terminated, truncated = terminated.copy(), truncated.copy()
                observation, _ = self.envs.reset(options={"reset_mask": ended})
        if self._acting is not None:
            np.logical_not(ended, out=self._acting[:, 0])
        return self._game_step(observation, reward, terminated, truncated)

    def _step_named(self, actions: dict) -> GameStep:
        """`step` for v2 spaces; a truncated episode's final observation goes with the step that reports it."""
        observation, reward, terminated, truncated, info = self.envs.step(self.spaces.env_action(actions))
        ended = terminated | truncated
        final = None
        if ended.any():
            self.episodes += int(ended.sum())
            cut = np.flatnonzero(truncated & ~terminated)
            if cut.size and self.autoreset == gym.vector.AutoresetMode.SAME_STEP:
                final = self.spaces.final_observation([info["final_obs"][e] for e in cut])
            elif cut.size:  # next step or disabled: the returned observation is the final one
                final = {k: v[cut] for k, v in self.spaces.observation(observation).items()}
            if self.autoreset == gym.vector.AutoresetMode.DISABLED:
                terminated, truncated = terminated.copy(), truncated.copy()
                observation, _ = self.envs.reset(options={"reset_mask": ended})
        if self._acting is not None:
            np.logical_not(ended, out=self._acting[:, 0])
        step = self._game_step(observation, reward, terminated, truncated)
        step.final_observation = final
        return step

    def summary(self) -> str:
        mode = f"{self.choice.mode} vector env" if self.choice else type(self.envs).__name__
        return f"{self.episodes} episodes played ({mode}, autoreset {self.autoreset.value})"

    def close(self) -> None:
        self.envs.close()

    def _game_step(self, observation, reward, terminated, truncated) -> GameStep:
        return GameStep(
            # views: {name: [E, 1, *shape]} ([E, *obs] -> [E, 1, *obs] for Box + Discrete)
            observation={"observation": observation[:, None]} if self.spaces is None
            else self.spaces.observation(observation),
            reward=np.asarray(reward)[:, None],
            terminated=terminated,
            truncated=truncated,
            acting=self._acting,
        )


def make_gym_game(env_id: str, num_envs: int, vector: str = "auto", protocol: int = 0) -> GymVectorGame:
    """Build the vector env (`envs.gym_vector.make_vector_env`) and wrap it; logs the choice. Raises UnsupportedEnv."""
    envs, choice = make_vector_env(env_id, num_envs, vector)
    try:
        game = GymVectorGame(env_id, envs, choice, protocol)
    except BaseException:
        envs.close()
        raise
    log.info("%s x %d: %s vector env (%s), autoreset %s", env_id, num_envs, choice.mode, choice.reason,
             game.autoreset.value)
    return game


def run_worker(config: WorkerConfig, stop: Optional[threading.Event] = None) -> WorkerStats:
    """Step envs for the host until `stop` is set or `max_steps` is reached. Raises HostRefused, UnsupportedEnv."""
    game = make_gym_game(config.env_id, config.num_envs, config.vector)
    try:
        return run_game_worker(game, config.loop, stop, log)
    finally:
        game.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's flags."""
    parser.add_argument("--address", required=True, help="host address, host:port")
    parser.add_argument("--env", dest="env_id", required=True, help="gymnasium env id, e.g. CartPole-v1 or ALE/Pong-v5")
    parser.add_argument("--num-envs", type=positive_int, default=32, help="env copies stepped together (default 32)")
    parser.add_argument(
        "--vector", choices=VECTOR_MODES, default="auto",
        help="vector env: native (the env's own vectorised class), sync (one process), async (a subprocess per "
             "env), or auto: native if the env has one, else async when a timed probe step says subprocesses "
             "pay on the usable cores (default auto)",
    )
    parser.add_argument(
        "--protocol", type=int, choices=(0, 2), default=0,
        help="0: protocol v1 where it carries the env's spaces (a Box observation, a Discrete action), else v2; "
             "2: v2 always (default 0)",
    )
    add_game_worker_arguments(parser)  # --seed, --max-steps, connection and security flags, --log-level


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point; returns the exit status (0 done or stopped, 2 bad flags, refused or unusable env)."""
    parser = argparse.ArgumentParser(prog="python -m envs.gym_worker", description=__doc__.split("\n\n")[0])
    add_arguments(parser)

    def make_game(args: argparse.Namespace) -> GymVectorGame:
        return make_gym_game(args.env_id, args.num_envs, args.vector, args.protocol)

    return game_worker_main(parser, argv, make_game, UnsupportedEnv, log)


if __name__ == "__main__":
    sys.exit(main())
