"""What every Python env worker shares: the reconnect loop, the stop signals, the
connection flags, and the session loop of a `VectorGame`.

    game = OpenSpielVectorGame("kuhn_poker", num_envs=64, seed=0)     # any VectorGame
    config = GameWorkerConfig(client=ClientConfig(address="127.0.0.1:50051"))
    stats = run_game_worker(game, config, stop)                       # until `stop` is set

A `VectorGame` is a plain object stepped without gRPC: it declares a named spec
(`NamedEnvSpec`: observation tensors and action heads) and the protocol it speaks
on the wire (`protocol`, 1 or 2); `reset(seed)` and `step({head: [E, S, ...]})`
return one step's arrays by those names (`GameStep`), with same-step autoreset
already applied (docs/protocol.md section 5). v1 exists only at the wire edge:
`NamedWorkerClient(protocol=1)` sends a game of v1's form (one tensor, one discrete
head) byte for byte as v1 workers always have. The worker
modules own their games; this module owns what happens around them: handshake,
lockstep steps, backoff and fresh episodes after a lost connection, SIGTERM/SIGINT
(exit 0), and `HostRefused` (exit 2). Every Python worker is a `VectorGame` run
here: `envs.gym_worker` (gymnasium vector envs), `envs.openspiel_worker`,
`envs.pettingzoo_worker`. With `--streams K` a worker steps its envs as K games on
K streams (`run_game_streams`), so one group steps while the others wait for the
host. Never imports jax.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence

import numpy as np

from seedleague.protocol import native_stream
from seedleague.protocol.client import Backoff, ClientConfig, ConnectionLost, HostRefused, WorkerClient
from seedleague.protocol.client_v2 import NamedWorkerClient
from seedleague.protocol.named import NamedEnvSpec
from seedleague.rl.named_spec import flat_specs
from seedleague.security import add_security_flags, client_security_from_args

log = logging.getLogger("envs.worker_loop")


@dataclasses.dataclass
class WorkerStats:
    """What a run did. A step is one message: every env stepped once."""

    steps: int = 0
    env_steps: int = 0
    sessions: int = 0  # successful handshakes
    reconnects: int = 0  # times the worker backed off after a lost connection or failed connect
    policy_version: int = 0  # last seen
    elapsed_s: float = 0.0


# ------------------------------------------------------------------ games --
@dataclasses.dataclass
class GameStep:
    """One step's arrays, laid out [env, seat, ...] as in docs/protocol.md section 2, named as the game's spec names
    its observation tensors and action heads (whichever protocol carries them on the wire)."""

    observation: dict  # {tensor: [E, S, *shape]} over the spec's observation arrays
    reward: np.ndarray  # [E, S] float32: what each seat got since the previous message
    terminated: np.ndarray  # [E] bool: the episode ended; `observation` already shows the next one
    truncated: np.ndarray  # [E] bool: the episode was cut off; likewise
    legal_mask: Optional[dict] = None  # {head: [E, S, n] bool} for the heads that declare a legal mask
    acting: Optional[np.ndarray] = None  # [E, S] bool: the seats whose action is applied
    # Where the game speaks protocol v2 (a v1 wire carries neither): the truncated envs' final observations
    # {name: [K, S, ...]} and episode stats {stat: [E, S]}.
    final_observation: Optional[dict] = None
    episode_stats: Optional[dict] = None


    @classmethod
    def zeros(cls, spec: NamedEnvSpec, acting: bool = False) -> "GameStep":
        """Buffers for `spec`'s steps, all zero (a legal mask for each head that declares one; every seat acting
        when `acting`): what a game's `step` fills in place."""
        agents = (spec.num_envs, spec.num_seats)
        masks = {head.name: np.zeros(agents + (head.num_actions,), bool) for head in spec.masked_heads}
        return cls(observation=spec.observation.zeros(agents), reward=np.zeros(agents, np.float32),
                   terminated=np.zeros(spec.num_envs, bool), truncated=np.zeros(spec.num_envs, bool),
                   legal_mask=masks or None, acting=(np.ones if acting else np.zeros)(agents, bool))

    def clear_ends(self) -> "GameStep":
        """No rewards and no episode ends: the step a reset returns."""
        self.reward.fill(0.0)
        self.terminated.fill(False)
        self.truncated.fill(False)
        return self


def head_actions(actions: dict, spec: NamedEnvSpec) -> np.ndarray:
    """The host's actions for `spec`'s one discrete head as an [E, S] array, or ValueError naming what they
    should be."""
    head, expected = spec.action.heads[0].name, (spec.num_envs, spec.num_seats)
    if not isinstance(actions, dict) or set(actions) != {head}:
        raise ValueError(f"actions must be {{{head!r}: [E, S] int}}, got "
                         f"{sorted(actions) if isinstance(actions, dict) else type(actions).__name__}")
    chosen = np.asarray(actions[head])
    if chosen.shape != expected:
        raise ValueError(f"actions[{head!r}] have shape {chosen.shape}, expected {expected}")
    return chosen


class VectorGame(Protocol):
    """`num_envs` game instances with `num_seats` seats each, stepped together in one process.

    The arrays of a returned `GameStep` are the game's own buffers, overwritten by
    the next `reset` or `step`: copy them to keep them.
    """

    spec: NamedEnvSpec  # its named observation tensors and action heads, whichever protocol carries them
    protocol: int  # the protocol the game speaks on the wire: 2, or 1 for a spec of v1's form (`wire_protocol`)

    def reset(self, seed: Optional[int] = None) -> GameStep:
        """Fresh episodes in every env (rewards and flags zero); `seed` reseeds the game's randomness."""

    def step(self, actions: dict) -> GameStep:
        """Apply `actions` {head: [E, S] int or [E, S, d] float} (non-acting seats' entries ignored); ended envs
        restart at once."""

    def summary(self) -> str:
        """One line for the worker's exit log, e.g. episodes played."""

    def close(self) -> None:
        """Release emulators and other resources."""


@dataclasses.dataclass(frozen=True)
class GameWorkerConfig:
    """One worker process stepping a VectorGame for a host."""

    client: ClientConfig  # address, name, limits, backoff, token/TLS
    seed: int = 0  # seeds the first session's reset; later sessions continue the game's random stream
    max_steps: int = 0  # env steps (all envs together) before exiting, rounded up to whole batches; 0 = unlimited
    log_interval_s: float = 10.0  # how often steps/s is logged

    def __post_init__(self):
        problems = []
        if not isinstance(self.client, ClientConfig):
            problems.append(f"client must be a ClientConfig, got {type(self.client).__name__}")
        if self.max_steps < 0:
            problems.append(f"max_steps must be >= 0 (0 = unlimited), got {self.max_steps}")
        if self.log_interval_s <= 0:
            problems.append(f"log_interval_s must be > 0, got {self.log_interval_s}")
        if problems:
            raise ValueError("bad worker config: " + "; ".join(problems))


def wire_protocol(game: VectorGame) -> int:
    """The protocol `game` declares it speaks on the wire (its `protocol`: 1 or 2), or ValueError naming the fix.
    The one place a worker chooses; v1 is the client's adapter at the wire edge (`NamedWorkerClient`), so a game
    that speaks v1 is v1 byte for byte on the wire while it hands the loop named dicts like any other."""
    protocol = getattr(game, "protocol", None)
    if protocol not in (1, 2):
        raise ValueError(f"{type(game).__name__}.protocol must be 1 or 2 (the protocol it speaks on the wire), "
                         f"got {protocol!r}")
    return protocol


def run_game_worker(
    game: VectorGame, config: GameWorkerConfig, stop: Optional[threading.Event] = None, logger: logging.Logger = log
) -> WorkerStats:
    """Step `game` for the host until `stop` is set or `max_steps` is reached. Raises HostRefused."""
    stop = stop if stop is not None else threading.Event()
    client = NamedWorkerClient(config.client, game.spec, protocol=wire_protocol(game))

    def run_session(stats: WorkerStats, seed: Optional[int], backoff: Backoff) -> None:
        _run_game_session(game, client, stop, stats, seed, backoff, config, logger)

    with closed_when_set(stop, client):
        return serve(client, stop, run_session, seed=config.seed, max_steps=config.max_steps, logger=logger)


def run_game_streams(
    games: Sequence[VectorGame], config: GameWorkerConfig, stop: Optional[threading.Event] = None,
    logger: logging.Logger = log,
) -> WorkerStats:
    """Double-buffered sampling (Petrenko et al. 2020, Sample Factory): each game steps on a stream of its own, in a
    thread of its own, so one group's envs step while the others' wait for the host's actions. The process's envs
    split into groups this way are as many sessions at the host. One game: `run_game_worker` in this thread.

    Stream i is named `<worker name>/i`, seeds its first reset with `config.seed + i * len(games[0] envs)` (so
    seeded envs never repeat across streams) and stops at its share of `config.max_steps`. A HostRefused on any
    stream stops them all and is raised here."""
    if len(games) == 1:
        return run_game_worker(games[0], config, stop, logger)
    stop = stop if stop is not None else threading.Event()
    outcomes: list[Any] = [None] * len(games)
    stride = games[0].spec.num_envs

    def run(i: int) -> None:
        stream = dataclasses.replace(
            config,
            client=dataclasses.replace(config.client, worker_name=f"{config.client.worker_name}/{i}"),
            seed=config.seed + i * stride,
            max_steps=-(-config.max_steps // len(games)),
        )
        try:
            outcomes[i] = run_game_worker(games[i], stream, stop, logger)
        except BaseException as error:  # noqa: BLE001 -- re-raised in the caller's thread below
            outcomes[i] = error
            stop.set()

    threads = [threading.Thread(target=run, args=(i,), name=f"stream-{i}", daemon=True) for i in range(len(games))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return WorkerStats(
        steps=sum(stats.steps for stats in outcomes),
        env_steps=sum(stats.env_steps for stats in outcomes),
        sessions=sum(stats.sessions for stats in outcomes),
        reconnects=sum(stats.reconnects for stats in outcomes),
        policy_version=max(stats.policy_version for stats in outcomes),
        elapsed_s=max(stats.elapsed_s for stats in outcomes),
    )


def split_envs(num_envs: int, streams: int) -> list[int]:
    """`num_envs` envs as `streams` groups whose sizes differ by at most one, largest first. Raises ValueError."""
    if not 1 <= streams <= num_envs:
        raise ValueError(f"--streams must be between 1 and --num-envs ({num_envs}): each stream steps at least one "
                         f"env; got {streams}")
    share, extra = divmod(num_envs, streams)
    return [share + (i < extra) for i in range(streams)]


def _exchange(client: NamedWorkerClient, step: GameStep) -> dict:
    """One step to the host and its actions back, {head: [E, S, ...]}: the client speaks the game's protocol on
    the wire (v1's adapter sends a v1 game's one tensor and head as v1 always did)."""
    return client.step(step.observation, step.reward, step.terminated, step.truncated, step.legal_mask, step.acting,
                       step.final_observation, step.episode_stats)


def _run_game_session(
    game: VectorGame,
    client: NamedWorkerClient,
    stop: threading.Event,
    stats: WorkerStats,
    seed: Optional[int],
    backoff: Backoff,
    config: GameWorkerConfig,
    logger: logging.Logger,
) -> None:
    """The hot loop: arrays -> host -> actions -> game step, all envs at once."""
    step = game.reset(seed)
    rate = RateLog(config.log_interval_s, stats.env_steps, logger)
    num_envs = game.spec.num_envs
    while not stop.is_set() and not budget_spent(config.max_steps, stats):
        actions = _exchange(client, step)
        backoff.reset()
        step = game.step(actions)
        stats.steps += 1
        stats.env_steps += num_envs
        rate.tick(stats.env_steps, client.policy_version)


ILLEGAL_LOG_EVERY = 1000  # log the 1st, 1001st, ... illegal action


class IllegalActions:
    """A turn-based game's guard against host actions that are not legal for the seat to move (e.g. from a host that
    ignores legal masks): each is replaced by that seat's first legal action, counted, and logged the first time and
    then every `ILLEGAL_LOG_EVERY`-th, so a worker never crashes on one (the C++ Connect Four worker does the same).

        illegal = IllegalActions(log)
        action = illegal.checked(env, seat, action, legal_mask[env, seat])   # [A] bool
    """

    def __init__(self, logger: logging.Logger = log):
        self.count = 0
        self._log = logger

    def checked(self, env: int, seat: int, action: int, legal_mask: np.ndarray) -> int:
        """`action` if `legal_mask` allows it, else the first legal action (counted; logged 1 in N)."""
        if 0 <= action < len(legal_mask) and legal_mask[action]:
            return action
        self.count += 1
        legal = int(np.flatnonzero(legal_mask)[0])
        if self.count % ILLEGAL_LOG_EVERY == 1:
            self._log.warning(
                "host sent illegal action %d for env %d seat %d (%d illegal so far, 1 in %d logged); "
                "played the first legal action %d", action, env, seat, self.count, ILLEGAL_LOG_EVERY, legal,
            )
        return legal


# ------------------------------------------------------- reconnect loop --
def serve(
    client: WorkerClient,
    stop: threading.Event,
    run_session: Callable[[WorkerStats, Optional[int], Backoff], None],
    *,
    seed: Optional[int],
    max_steps: int,
    logger: logging.Logger = log,
) -> WorkerStats:
    """Connect, run a session, and on a lost connection back off and start over with fresh episodes.

    `run_session(stats, seed, backoff)` steps until stopped or the budget is spent,
    resets `backoff` after every successful step, and lets ConnectionLost (retry)
    and HostRefused (give up: propagates to the caller) escape. `seed` is passed
    to the first session only; later sessions get None.
    """
    stats = WorkerStats()
    config = client.config
    backoff = Backoff(config.backoff_initial_s, config.backoff_max_s)
    started = time.monotonic()
    while not stop.is_set() and not budget_spent(max_steps, stats):
        try:
            client.connect()
            stats.sessions += 1
            logger.info("connected to %s as %s: session %s (%s)", config.address, config.worker_name, client.session_id,
                        client.stream_kind)
            run_session(stats, seed if stats.sessions == 1 else None, backoff)
        except ConnectionLost as error:
            if stop.is_set():
                break
            delay = backoff.next()
            stats.reconnects += 1
            logger.warning("lost the host at %s (%s); reconnecting in %.2f s", config.address, error, delay)
            stop.wait(delay)
    stats.policy_version = client.policy_version
    stats.elapsed_s = time.monotonic() - started
    return stats


def budget_spent(max_steps: int, stats: WorkerStats) -> bool:
    return max_steps > 0 and stats.env_steps >= max_steps


class RateLog:
    """Logs env steps/s at INFO every `interval_s`."""

    def __init__(self, interval_s: float, env_steps: int, logger: logging.Logger = log):
        self._interval_s = interval_s
        self._since = time.monotonic()
        self._env_steps = env_steps
        self._log = logger

    def tick(self, env_steps: int, policy_version: int) -> None:
        now = time.monotonic()
        if now - self._since < self._interval_s:
            return
        rate = (env_steps - self._env_steps) / (now - self._since)
        self._log.info("%.0f env steps/s, %d env steps in all, policy version %d", rate, env_steps, policy_version)
        self._since, self._env_steps = now, env_steps


@contextlib.contextmanager
def closed_when_set(stop: threading.Event, client: WorkerClient) -> Iterator[None]:
    """Close `client` as soon as `stop` is set, so a blocked connect or step returns at once."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if stop.wait(0.2):
                client.close()
                return

    watcher = threading.Thread(target=watch, name="stop-watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        client.close()
        watcher.join()


STOP_GRACE_S = 15.0  # a worker still running this long after a stop signal prints its stacks and exits 1


def stop_on_signals(stop: threading.Event, logger: logging.Logger = log) -> None:
    """SIGTERM/SIGINT set `stop`; a second signal kills the process at once.

    The handler only writes to a pipe (the self-pipe trick); a relay thread sets
    the event, so the handler never takes a lock the main thread might hold. A process
    that has not ended STOP_GRACE_S after the signal (a gRPC teardown that hangs, even
    one holding the GIL) prints every thread's stack to stderr and exits 1, from
    faulthandler's own C thread: a supervisor sees where it hung, and never waits on it.
    """
    read_fd, write_fd = os.pipe()

    def handle(signum: int, frame) -> None:
        signal.signal(signum, signal.SIG_DFL)
        os.write(write_fd, bytes([signum]))

    def relay() -> None:
        signum = os.read(read_fd, 1)[0]
        logger.info("got %s: stopping", signal.Signals(signum).name)
        faulthandler.dump_traceback_later(STOP_GRACE_S, exit=True)
        stop.set()

    threading.Thread(target=relay, name="signal-relay", daemon=True).start()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handle)


# ------------------------------------------------------------------ flags --
def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """--worker-name, --max-message-bytes, backoff, --connect-timeout, --log-interval, --token, --tls-ca."""
    defaults = ClientConfig(address="unused:0")
    parser.add_argument("--worker-name", default=None, help="name in the host's logs (default hostname:pid)")
    parser.add_argument("--max-message-bytes", type=int, default=defaults.max_message_bytes)
    parser.add_argument("--backoff-initial", type=float, default=defaults.backoff_initial_s, help="seconds")
    parser.add_argument("--backoff-max", type=float, default=defaults.backoff_max_s, help="seconds")
    parser.add_argument("--connect-timeout", type=float, default=defaults.connect_timeout_s, help="seconds")
    parser.add_argument(
        "--log-interval", type=float, default=GameWorkerConfig.log_interval_s, help="seconds between steps/s logs"
    )
    parser.add_argument(
        "--native-stream", choices=native_stream.MODES, default=ClientConfig.native_stream,
        help="exchange each step in C++ (less CPU per step): auto where `make native-stream` built it, on to "
        "require it, off for grpcio's stream",
    )
    parser.add_argument(
        "--native-stream-library", default=os.environ.get(native_stream.LIBRARY_ENV, ""),
        help=f"the native stream library's path (default ${native_stream.LIBRARY_ENV}, else "
        "build/native/libseedleague_stream.so in this checkout)",
    )
    add_security_flags(parser, "client")  # --token (or $SEEDLEAGUE_TOKEN), --tls-ca


def client_config_from_args(args: argparse.Namespace) -> ClientConfig:
    """ClientConfig from --address and the flags of `add_connection_arguments`; raises ValueError."""
    optional = {"worker_name": args.worker_name} if args.worker_name else {}
    return ClientConfig(
        address=args.address,
        max_message_bytes=args.max_message_bytes,
        backoff_initial_s=args.backoff_initial,
        backoff_max_s=args.backoff_max,
        connect_timeout_s=args.connect_timeout,
        security=client_security_from_args(args),
        native_stream=args.native_stream,
        native_stream_library=args.native_stream_library,
        **optional,
    )


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_game_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every game worker shares after its own (--address, game, --num-envs)."""
    parser.add_argument("--seed", type=int, default=0, help="seed of the game's random stream (chance, no-op starts)")
    parser.add_argument(
        "--max-steps", type=int, default=0, help="exit after this many env steps, all envs together (0 = no limit)"
    )
    parser.add_argument(
        "--streams", type=positive_int, default=1,
        help="step the envs as this many groups, each on its own stream and thread, so one group steps while the "
             "others wait for the host's actions (double-buffered sampling; default 1). It pays where the env steps "
             "outside the GIL (ALE's C++ vector env) on spare CPUs, and costs where stepping is Python or numpy "
             "(benchmarks/README.md, 'Several streams per worker')",
    )
    add_connection_arguments(parser)
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def game_worker_main(
    parser: argparse.ArgumentParser,
    argv: Optional[Sequence[str]],
    make_game: Callable[[argparse.Namespace], VectorGame],
    unsupported: type[Exception],
    logger: logging.Logger,
) -> int:
    """Parse flags, make the game (before connecting), serve it; the exit status.

    0 stopped (SIGTERM/SIGINT or --max-steps), 2 bad flags, unusable game (an
    `unsupported` error, whose message is logged) or refused by the host.
    """
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = GameWorkerConfig(
            client=client_config_from_args(args),
            seed=args.seed,
            max_steps=args.max_steps,
            log_interval_s=args.log_interval,
        )
    except ValueError as error:
        parser.error(str(error))
    try:
        shares = split_envs(args.num_envs, args.streams)
    except ValueError as error:
        parser.error(str(error))
    games: list[VectorGame] = []
    try:
        for i, share in enumerate(shares):
            games.append(make_game(argparse.Namespace(**{**vars(args), "num_envs": share,
                                                         "seed": args.seed + i * shares[0]})))
    except unsupported as error:
        logger.error("%s", error)
        for game in games:
            game.close()
        return 2
    stop = threading.Event()
    stop_on_signals(stop, logger)
    try:
        stats = run_game_streams(games, config, stop, logger)
    except HostRefused as error:
        logger.error("%s", error)
        return 2
    finally:
        for game in games:
            game.close()
    logger.info("stopped: %s; %s", stats, "; ".join(game.summary() for game in games))
    return 0


def turn_based_spec(env_name: str, observation_shape: Sequence[int], num_actions: int, num_envs: int,
                    num_seats: int = 2, return_bound: float = 0.0) -> NamedEnvSpec:
    """The spec of a turn-based board or card game: float32 observations for every seat as one tensor
    "observation", and one discrete head "action" with a legal mask (all False for the seats not to move), as the
    OpenSpiel and PettingZoo classic workers send; `return_bound` is the game's largest absolute payoff where it
    declares one (0: not declared). v1's form: such a game speaks v1 on the wire, byte for byte what it always sent."""
    observation, action = flat_specs(tuple(observation_shape), np.float32, num_actions, True)
    return NamedEnvSpec(env_name, observation, action, num_envs, num_seats, return_bound=return_bound)


def fixed_game_main(module: str, doc: str, argv: Optional[Sequence[str]], make_game: Callable[..., VectorGame],
                    logger: logging.Logger, options: Optional[dict[str, dict]] = None) -> int:
    """The entry point of a worker whose game has few settings of its own (`envs.shootout_worker`,
    `envs.tug_worker`): --address, --num-envs, the game's `options` ({"--flag": add_argument's keywords}, each
    passed to the game by its name) and the flags every game worker shares, then `game_worker_main` with
    `make_game(num_envs, seed, **options)` (a ValueError from it exits 2). `doc`'s first paragraph is the --help
    text."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    parser.add_argument("--address", required=True, help="host address, host:port")
    parser.add_argument("--num-envs", type=positive_int, default=64, help="games stepped together (default 64)")
    names = [parser.add_argument(flag, **keywords).dest for flag, keywords in (options or {}).items()]
    add_game_worker_arguments(parser)
    return game_worker_main(
        parser, argv, lambda args: make_game(args.num_envs, args.seed, **{name: getattr(args, name) for name in names}),
        ValueError, logger)


class EnvPerSlot:
    """For a VectorGame that holds one env object per slot in `_envs` (each with a `close()`), restarts slot e with
    `_start(e, seed)` and counts finished `episodes`: opening the envs, seeded restarts, `summary` and `close`."""

    _envs: list
    episodes: int
    _start: Callable[[int, Optional[int]], None]  # the subclass's: (re)start slot `env`'s episode, seeded when given

    def _open_envs(self, make_env: Callable[[], Any], num_envs: int, seed: Optional[int] = None) -> None:
        """`num_envs` envs from `make_env()` (those made are closed if one fails); `seed` is the first reset's."""
        self._envs, self._seed, self._seeded, self.episodes = [], seed, False, 0
        try:
            for _ in range(num_envs):
                self._envs.append(make_env())
        except BaseException:
            self.close()
            raise

    def _start_all(self, seed: Optional[int]) -> None:
        """Restart every env; `seed` reseeds env e with `seed + e` (the first reset uses the constructor's seed when
        given None; later ones continue each env's random stream)."""
        if seed is None and not self._seeded:
            seed = self._seed
        self._seeded = True
        for env in range(len(self._envs)):
            self._start(env, None if seed is None else seed + env)

    def summary(self) -> str:
        return f"{self.episodes} episodes played"

    def close(self) -> None:
        for env in self._envs:
            env.close()


class CountsIllegalActions:
    """For a turn-based VectorGame that keeps an `IllegalActions` as `_illegal` and counts `episodes`: the
    count in its `illegal_actions` and its `summary`."""

    _illegal: IllegalActions
    episodes: int

    @property
    def illegal_actions(self) -> int:
        """Host actions replaced by the first legal action so far."""
        return self._illegal.count

    def summary(self) -> str:
        return f"{self.episodes} games played, {self.illegal_actions} illegal host actions replaced"
