"""The PettingZoo env worker: steps `num_envs` copies of a two-player PettingZoo
Atari game (Pong by default), a classic turn-based game or a multi-particle (MPE)
game and lets a seedleague host choose the seats' actions.

    python -m envs.pettingzoo_worker --address 127.0.0.1:50051 --game pong_v3 --num-envs 2
    python -m envs.pettingzoo_worker --address host:50051 --game boxing_v2 --max-cycles 2000
    python -m envs.pettingzoo_worker --address host:50051 --game classic/tictactoe_v3 --num-envs 64
    python -m envs.pettingzoo_worker --address host:50051 --game 'mpe/simple_tag_v3(num_good=2)' --num-envs 8

A game is named `<family>/<game>` as in PettingZoo's registry; a bare name is an
Atari one (`pong_v3` = `atari/pong_v3`). `classic/<game>` games are AEC envs
stepped turn by turn by `envs.pettingzoo_classic` (its docstring says what each
message carries); `mpe/<game>` games (the mpe2 package, any number of agents,
teams, protocol v2) come from `envs.pettingzoo_mpe`; the rest of this docstring
is about the Atari ones.

Both seats act on every step (`acting` all True, no legal mask); seat s is the
env's agent s (`possible_agents` order: Pong's `first_0` is the right paddle,
`second_0` the left). Preprocessing follows `envs.atari` for single-player
Atari: each action is repeated for 4 frames (rewards summed, the last two
frames max-pooled), the grayscale screen is resized to 84x84, and the last 4
frames are stacked HWC: observation [84, 84, 4] uint8 per seat. Episodes start
with up to 30 no-op frames. By default seat 1 sees the frame mirrored left to
right, so in Pong both seats see their own paddle on the right (`--no-mirror`
gives both seats the same frame, better for games not laid out left/right).
`reward[e, s]` is what agent s got over the 4 frames. When every agent is
terminated (game over), or after `--max-cycles` steps (truncated), the next
message carries the flag, the final rewards and already the first observation
of a new episode (same-step autoreset, docs/protocol.md section 5).

Envs come from PettingZoo's registry, `pettingzoo.make("parallel", "atari/pong_v3",
...)`: the same `parallel_env` as `pettingzoo.atari.pong_v3`, without that
module's deprecation warning. ROMs come from ale_py's `roms/` folder
(`auto_rom_install_path`); nothing is downloaded. Games other than two-player
`pettingzoo.atari` and the classic ones `envs.pettingzoo_classic` steps exit 2
before connecting, naming the problem. Never imports jax.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Optional, Sequence

import cv2
import numpy as np

from envs.atari import FRAME_STACK, SCREEN_SIZE
from envs.pettingzoo_classic import ClassicVectorGame, UnsupportedClassicGame
from envs.pettingzoo_mpe import UnsupportedMPEGame, make_mpe_game
from envs.pettingzoo_parallel import ParallelVectorGame
from envs.worker_loop import (EnvPerSlot, GameStep, add_game_worker_arguments, game_worker_main, head_actions,
                               positive_int)
from seedleague.protocol.named import NamedEnvSpec
from seedleague.rl.named_spec import flat_specs

log = logging.getLogger("envs.pettingzoo_worker")

NUM_SEATS = 2
FRAME_SKIP = 4
NOOP_MAX = 30
NOOP_ACTION = 0  # ALE's NOOP is first in every minimal action set


FAMILIES = ("atari", "classic", "mpe")  # the PettingZoo families this worker steps


class UnsupportedGame(ValueError):
    """The name is not a two-player PettingZoo Atari game with Discrete actions, nor a classic game the worker steps."""


def split_game_name(name: str) -> tuple[str, str]:
    """("atari", "pong_v3") for "pong_v3" or "atari/pong_v3", ("classic", "tictactoe_v3") for "classic/tictactoe_v3",
    ("mpe", "simple_tag_v3(num_good=2)") for "mpe/simple_tag_v3(num_good=2)"; raises UnsupportedGame for another
    family."""
    head, paren, kwargs = name.partition("(")  # mpe/simple_tag_v3(num_good=2): keyword arguments after "("
    family, _, game = head.rpartition("/")
    game += paren + kwargs
    family = family or "atari"
    if family not in FAMILIES or not game:
        raise UnsupportedGame(f"unsupported PettingZoo game {name!r}: the PettingZoo worker runs the families "
                              f"{', '.join(FAMILIES)}, named <family>/<game> (a bare name is atari): e.g. pong_v3, "
                              "classic/tictactoe_v3, mpe/simple_spread_v3")
    return family, game


def make_vector_game(name: str, num_envs: int, seed: int = 0, max_cycles: int = 5000,
                     mirror: bool = True) -> "PettingZooVectorGame | ClassicVectorGame | ParallelVectorGame":
    """The VectorGame for a PettingZoo game name (see `split_game_name`); raises UnsupportedGame."""
    family, game = split_game_name(name)
    if family == "mpe":
        try:
            return make_mpe_game(game, num_envs, seed, max_cycles)
        except UnsupportedMPEGame as error:
            raise UnsupportedGame(str(error)) from None
    if family == "classic":
        try:
            return ClassicVectorGame(game, num_envs, seed, max_cycles)
        except UnsupportedClassicGame as error:
            raise UnsupportedGame(str(error)) from None
    return PettingZooVectorGame(game, num_envs, seed, max_cycles, mirror=mirror)


def make_parallel_env(game_name: str, max_frames: int) -> Any:
    """One grayscale parallel env of PettingZoo's registered `atari/<game_name>`, ROM from ale_py.

    The registry's entry point is the `parallel_env` of `pettingzoo.atari.<game_name>`
    without that module's deprecation warning. Raises UnsupportedGame.
    """
    import ale_py  # The ROMs ship in ale_py/roms/.
    import pettingzoo
    import pettingzoo.env_registry.exceptions

    atari = [spec.id for spec in pettingzoo.parallel_registry.values() if spec.namespace == "atari"]
    names = sorted(name[len("atari/"):].replace("-v", "_v") for name in atari)  # pong-v3 is known as pong_v3
    supported = (f"the PettingZoo worker runs two-player pettingzoo.atari games, e.g. pong_v3 (all: "
                 f"{', '.join(names)}), and classic turn-based games named classic/<game>, e.g. classic/tictactoe_v3")
    try:
        spec = pettingzoo.spec("parallel", f"atari/{game_name}")
    except pettingzoo.env_registry.exceptions.PettingZooRegistryError:
        raise UnsupportedGame(f"unsupported PettingZoo game {game_name!r}: {supported}") from None
    env = pettingzoo.make(
        "parallel",
        spec,
        max_cycles=max_frames,
        auto_rom_install_path=os.path.dirname(ale_py.__file__),
        obs_type="grayscale_image",
    )
    agents = list(env.possible_agents)
    sizes = {getattr(env.action_space(agent), "n", None) for agent in agents}
    if len(agents) != NUM_SEATS or len(sizes) != 1 or None in sizes:
        env.close()
        raise UnsupportedGame(
            f"unsupported PettingZoo game {game_name!r}: it has agents {agents} with action spaces "
            f"{[env.action_space(agent) for agent in agents]}; {supported}"
        )
    return env


class PettingZooVectorGame(EnvPerSlot):
    """`num_envs` two-player PettingZoo Atari games, stepped together; a `worker_loop.VectorGame`.

        game = PettingZooVectorGame("pong_v3", num_envs=2, seed=0, max_cycles=5000)
        step = game.reset()             # GameStep: observation {"observation": [E, 2, 84, 84, 4] uint8}, acting
        step = game.step({"action": a}) # a [E, 2] int in [0, 6): both seats act

    The returned arrays are buffers reused by the next call.
    """

    protocol = 1  # spoken on the wire: v1 carries the spec (one tensor, one unmasked head), as it always did

    def __init__(self, game_name: str, num_envs: int, seed: int = 0, max_cycles: int = 5000, mirror: bool = True):
        if num_envs < 1 or max_cycles < 1:
            raise ValueError(f"need num_envs >= 1 and max_cycles >= 1, got {num_envs} and {max_cycles}")
        self.max_cycles = max_cycles
        self.mirror = mirror
        # The env never truncates on its own: this class counts steps (each FRAME_SKIP frames).
        max_frames = (max_cycles + 1) * FRAME_SKIP + NOOP_MAX + 1
        self._open_envs(lambda: make_parallel_env(game_name, max_frames), num_envs)
        self._agents = list(self._envs[0].possible_agents)
        self.num_actions = int(self._envs[0].action_space(self._agents[0]).n)
        observation, action = flat_specs((SCREEN_SIZE, SCREEN_SIZE, FRAME_STACK), np.uint8, self.num_actions, False)
        self.spec = NamedEnvSpec(f"pettingzoo:{game_name}", observation, action, num_envs, NUM_SEATS)
        self._out = GameStep.zeros(self.spec, acting=True)
        (self._stacks,) = self._out.observation.values()  # [E, 2, 84, 84, 4]: each seat's frame stack
        self._rng = np.random.default_rng(seed)
        self._steps = np.zeros(num_envs, np.int64)  # steps of each env's current episode

    def reset(self, seed: Optional[int] = None) -> GameStep:
        """Fresh episodes everywhere; `seed` reseeds the emulators (env e gets seed + e) and the no-op starts."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        for env in range(self.spec.num_envs):
            self._start(env, None if seed is None else seed + env)
        return self._out.clear_ends()

    def step(self, actions: dict) -> GameStep:
        """Both seats' actions ({"action": [E, 2] int}) for FRAME_SKIP frames in every env; ended episodes restart
        in the same step."""
        actions = head_actions(actions, self.spec)
        if actions.size and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise ValueError(f"actions must be in [0, {self.num_actions}), got {actions.tolist()}")
        out = self._out
        for env in range(self.spec.num_envs):
            frame, game_over = self._repeat(env, actions[env])
            self._steps[env] += 1
            out.terminated[env] = game_over
            out.truncated[env] = not game_over and self._steps[env] >= self.max_cycles
            if game_over or out.truncated[env]:
                self.episodes += 1
                self._start(env, None)
            else:
                self._push(env, frame)
        return out

    def _repeat(self, env: int, row: np.ndarray) -> tuple[Optional[np.ndarray], bool]:
        """Play one action per seat for FRAME_SKIP frames; (max of the last two frames, game over?)."""
        game = self._envs[env]
        chosen = {agent: int(row[seat]) for seat, agent in enumerate(self._agents)}
        reward = self._out.reward[env]
        reward.fill(0.0)
        last = previous = None
        for _ in range(FRAME_SKIP):
            observations, rewards, terminations, _, _ = game.step(chosen)
            for seat, agent in enumerate(self._agents):
                reward[seat] += rewards.get(agent, 0.0)
            if any(terminations.values()) or not game.agents:
                return None, True
            previous, last = last, observations[self._agents[0]]
        return (last if previous is None else np.maximum(last, previous)), False

    def _start(self, env: int, seed: Optional[int]) -> None:
        """Reset env, play 0..NOOP_MAX no-op frames, and fill its frame stack with the first frame."""
        game = self._envs[env]
        observations, _ = game.reset(seed=seed)
        frame = observations[self._agents[0]]
        noops = {agent: NOOP_ACTION for agent in self._agents}
        for _ in range(int(self._rng.integers(0, NOOP_MAX + 1))):
            observations, _, terminations, _, _ = game.step(noops)
            if any(terminations.values()) or not game.agents:
                observations, _ = game.reset()
            frame = observations[self._agents[0]]
        self._steps[env] = 0
        stack = self._stacks[env, 0]
        stack[...] = _downsample(frame)[:, :, None]
        self._show_second_seat(env)

    def _push(self, env: int, frame: np.ndarray) -> None:
        """Shift env's stack by one frame and append `frame` as the newest channel."""
        stack = self._stacks[env, 0]
        stack[:, :, :-1] = stack[:, :, 1:]  # numpy copies overlapping slices correctly
        stack[:, :, -1] = _downsample(frame)
        self._show_second_seat(env)

    def _show_second_seat(self, env: int) -> None:
        observation = self._stacks[env]
        observation[1] = observation[0, :, ::-1] if self.mirror else observation[0]


def _downsample(frame: np.ndarray) -> np.ndarray:
    """A [210, 160, 1] grayscale screen as [84, 84] uint8 (area interpolation, as gymnasium's AtariPreprocessing)."""
    return cv2.resize(frame.reshape(frame.shape[:2]), (SCREEN_SIZE, SCREEN_SIZE), interpolation=cv2.INTER_AREA)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's flags."""
    parser.add_argument("--address", required=True, help="host address, host:port")
    parser.add_argument("--game", default="pong_v3",
                        help="two-player pettingzoo.atari game, classic/<game>, or mpe/<game> with optional keyword "
                             "arguments, e.g. 'mpe/simple_tag_v3(num_good=2)' (default pong_v3)")
    parser.add_argument("--num-envs", type=positive_int, default=2, help="games stepped together (default 2)")
    parser.add_argument(
        "--max-cycles", type=positive_int, default=5000,
        help=f"steps ({FRAME_SKIP} frames each; classic games: turns; MPE games: steps, their own max_cycles keyword "
             "truncating first) before an episode is truncated (default 5000)",
    )
    parser.add_argument("--no-mirror", action="store_true",
                        help="Atari: give seat 1 the same frame as seat 0, not mirrored")
    add_game_worker_arguments(parser)  # --seed, --max-steps, connection and security flags, --log-level


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point; 0 stopped, 2 bad flags, unusable game or refused by the host."""
    parser = argparse.ArgumentParser(prog="python -m envs.pettingzoo_worker", description=__doc__.split("\n\n")[0])
    add_arguments(parser)

    def make_game(args: argparse.Namespace) -> "PettingZooVectorGame | ClassicVectorGame | ParallelVectorGame":
        return make_vector_game(args.game, args.num_envs, args.seed, args.max_cycles, mirror=not args.no_mirror)

    return game_worker_main(parser, argv, make_game, UnsupportedGame, log)


if __name__ == "__main__":
    sys.exit(main())
