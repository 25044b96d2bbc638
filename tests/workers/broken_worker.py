"""A deliberately broken env worker, for testing `seedleague check-worker`.

    python tests/workers/broken_worker.py --address HOST:PORT --fault {none,wrong-shape,bad-mask,no-reconnect,...}

It steps a tiny counting game (2 envs, 1 seat, observation float32[3], 2
actions, legal masks declared, episodes of 3 to 7 steps paying 1 or 2 a step,
so returns of at most 14, the return bound it declares) through WorkerClient.
With `--fault none` it is well behaved: it reconnects with backoff after a lost
connection and exits 0 on SIGTERM. Each fault breaks exactly one rule:

  wrong-shape   from step 4 of a session, observations carry shape [2, 1, 4]
  bad-mask      from step 4, env 0's legal mask is all false although it acts
  no-reconnect  exits 1 when the connection drops instead of reconnecting
  missing-tensor  (protocol 2 only) from step 4, the "progress" observation tensor is left out
  low-bound     declares a return bound of 2, which its episodes exceed

With `--protocol 2` it speaks protocol v2 through NamedWorkerClient: the same
game with two named observation tensors ("progress" float32[3], "flags" uint8[2])
and the action as one discrete head "act" with a legal mask.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
from typing import Optional, Sequence

import numpy as np

from seedleague.protocol.client import Backoff, ClientConfig, ConnectionLost, HostRefused, WorkerClient
from seedleague.protocol.client_v2 import NamedWorkerClient
from seedleague.protocol.specs import EnvSpec
from seedleague.protocol.named import ActionSpec, DiscreteHead, ObservationSpec, NamedEnvSpec, TensorSpec

FAULTS = ("none", "wrong-shape", "bad-mask", "no-reconnect", "missing-tensor", "low-bound")
FAULT_FROM_STEP = 4
SPEC = EnvSpec("broken-counter", (3,), np.float32, num_actions=2, num_envs=2, num_seats=1, has_legal_mask=True,
               return_bound=14.0)

SPEC_V2 = NamedEnvSpec(
    "broken-counter-v2", ObservationSpec((TensorSpec("progress", (3,), np.float32), TensorSpec("flags", (2,), np.uint8))),
    ActionSpec((DiscreteHead("act", 2, has_legal_mask=True),)), num_envs=2)

log = logging.getLogger("broken_worker")


class CountingGame:
    """`num_envs` episodes that end after 3 to 7 steps; same-step autoreset."""

    def __init__(self, num_envs: int, seed: int):
        self._rng = np.random.default_rng(seed)
        self._t = np.zeros(num_envs, np.int64)
        self._length = self._rng.integers(3, 8, num_envs)

    def observation(self) -> np.ndarray:
        """[E, 1, 3] float32: progress through the episode, env index, 1."""
        env = np.arange(len(self._t))
        return np.stack([self._t / self._length, env, np.ones_like(env)], axis=-1)[:, None, :].astype(np.float32)

    def legal_mask(self) -> np.ndarray:
        """[E, 1, 2]: action 0 always legal, action 1 on even steps."""
        mask = np.ones((len(self._t), 1, 2), bool)
        mask[:, 0, 1] = self._t % 2 == 0
        return mask

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply actions; returns (reward [E, 1], terminated [E]) and resets ended envs."""
        self._t += 1
        reward = (1.0 + actions[:, 0]).astype(np.float32)[:, None]
        terminated = self._t >= self._length
        self._t[terminated] = 0
        self._length[terminated] = self._rng.integers(3, 8, int(terminated.sum()))
        return reward, terminated


class SloppyClient(WorkerClient):
    """A WorkerClient whose observation tensor header can be made to lie, like a buggy non-Python worker."""

    wrong_shape = False

    def _fill(self, message, *args) -> None:
        super()._fill(message, *args)
        if self.wrong_shape:
            shape = (SPEC.num_envs, SPEC.num_seats, 4)
            message.observation.shape[:] = shape
            message.observation.data = np.zeros(shape, "<f4").tobytes()


class SloppyNamedClient(NamedWorkerClient):
    """A NamedWorkerClient that can be made to leave the "progress" tensor out of its messages."""

    wrong_shape = False
    drop_tensor = False

    def _exchange(self, stream, message):
        if self.drop_tensor:
            kept = [item for item in message.observation if item.name != "progress"]
            del message.observation[:]
            message.observation.extend(kept)
        return super()._exchange(stream, message)

    def step(self, observation, reward, terminated, truncated, legal_mask=None, acting=None):
        """The v1 call of the game loop, as v2: the observation split into two named tensors."""
        observation = {"progress": observation, "flags": np.ones(observation.shape[:2] + (2,), np.uint8)}
        actions = super().step(observation, reward, terminated, truncated, {"act": legal_mask}, acting)
        return actions["act"]


def run_session(client: SloppyClient, game: CountingGame, fault: str, stop: threading.Event) -> None:
    """Step until the connection drops or `stop` is set."""
    reward = np.zeros((SPEC.num_envs, 1), np.float32)
    terminated = np.zeros(SPEC.num_envs, bool)
    truncated = np.zeros(SPEC.num_envs, bool)
    step = 0
    while not stop.is_set():
        client.wrong_shape = fault == "wrong-shape" and step >= FAULT_FROM_STEP
        client.drop_tensor = fault == "missing-tensor" and step >= FAULT_FROM_STEP
        mask = game.legal_mask()
        if fault == "bad-mask" and step >= FAULT_FROM_STEP:
            mask[0] = False
        actions = client.step(game.observation(), reward, terminated, truncated, legal_mask=mask)
        reward, terminated = game.step(actions)
        step += 1


def serve(address: str, fault: str, stop: threading.Event, protocol: int = 1) -> int:
    """Connect and step; reconnect after lost connections (unless the fault says not to)."""
    config = ClientConfig(address, worker_name=f"broken-{fault}", backoff_initial_s=0.05, backoff_max_s=0.5)
    spec = dataclasses.replace(SPEC, return_bound=2.0) if fault == "low-bound" else SPEC
    client = SloppyClient(config, spec) if protocol == 1 else SloppyNamedClient(config, SPEC_V2)
    watcher = threading.Thread(target=lambda: (stop.wait(), client.close()), daemon=True)
    watcher.start()
    try:
        return _serve_sessions(client, fault, stop)
    finally:
        client.close()  # an open channel can hold the interpreter's exit (giving up must exit at once)


def _serve_sessions(client, fault: str, stop: threading.Event) -> int:
    backoff = Backoff(0.05, 0.5)
    sessions = 0
    while not stop.is_set():
        try:
            client.connect()
            sessions += 1
            backoff.reset()
            run_session(client, CountingGame(SPEC.num_envs, seed=sessions), fault, stop)
        except ConnectionLost as error:
            if stop.is_set():
                break
            if fault == "no-reconnect" and sessions > 0:
                log.error("connection lost (%s): giving up", error)
                return 1
            log.warning("connection lost (%s): reconnecting", error)
            stop.wait(backoff.next())
        except HostRefused as error:
            log.error("%s", error)
            return 2
    log.info("stopped after %d sessions", sessions)
    return 0


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM/SIGINT set `stop`; the handler only writes to a pipe that a relay thread reads."""
    read_fd, write_fd = os.pipe()
    threading.Thread(target=lambda: (os.read(read_fd, 1), stop.set()), daemon=True).start()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: os.write(write_fd, bytes([signum])))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--fault", choices=FAULTS, default="none")
    parser.add_argument("--protocol", type=int, choices=(1, 2), default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    _stop_on_signals(stop)
    return serve(args.address, args.fault, stop, args.protocol)


if __name__ == "__main__":
    sys.exit(main())
