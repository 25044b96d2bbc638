"""`seedleague fake-host`: a host with no model, for developing an env worker.

    seedleague fake-host --address 127.0.0.1:50051 [--observation-shape 4 --num-actions 2]

It serves the real EnvService (same servicer, same limits) over `FakeBackend`,
answers every step with uniformly random legal actions, prints each protocol
violation as it happens (with the offending step's sequence number) and a
summary of every session when it closes, and runs until Ctrl-C or SIGTERM
(exit 0). This module owns that command and `describe_spec`, the one-line
rendering of an EnvSpec both tools print.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from typing import Optional, Sequence

import numpy as np

from seedleague import subcommand
from seedleague.grpc_server import ThreadedServer
from seedleague.host.servicer import SERVICE_NAMES, EnvServicer
from seedleague.protocol import codec, codec_v2
from seedleague.protocol.errors import RESOURCE_EXHAUSTED, ProtocolError
from seedleague.protocol.specs import PROTOCOL_VERSION
from seedleague.protocol.named import (PROTOCOL_VERSION_V2, DiscreteHead, NamedEnvSpec, NamedStepBatch,
                                       v1_of_named)
from seedleague.testing.fakes import FakeBackend, FakeHostConfig, FakeSession
from seedleague.security import ServerSecurity, add_security_flags, server_security_from_args

DEFAULT_ADDRESS = "127.0.0.1:50051"
# gRPC refuses a message above its receive limit before any Python code sees it, and the server
# side only notices a cancelled call: the fake host would stay silent about it. So it lets gRPC
# take messages up to TRANSPORT_HEADROOM bytes beyond its limit and refuses, and prints, those
# above the limit itself, with the status the host gives (RESOURCE_EXHAUSTED).
TRANSPORT_HEADROOM = 64 * 2**20
MAX_TRANSPORT_BYTES = 2**31 - 1  # gRPC's largest message-size setting


def describe_spec(spec: NamedEnvSpec) -> str:
    """One line: name, observation dtype/shape, actions, envs x seats, legal masks, a declared return bound; a spec
    that only protocol v2 can say (several tensors or heads, a continuous head, stats, teams): every tensor and head,
    marked "(protocol v2)"."""
    v1 = v1_of_named(spec)
    if v1 is not None:
        shape = "x".join(str(d) for d in v1.observation_shape) or "scalar"
        return (f"{v1.env_name!r}: observation {v1.observation_dtype.name}[{shape}], {v1.num_actions} actions, "
                f"{v1.num_envs} envs x {v1.num_seats} seats, legal masks {'yes' if v1.has_legal_mask else 'no'}"
                + (f", return bound {v1.return_bound:g}" if v1.return_bound else ""))
    tensors = ", ".join(f"{t.name} {t.dtype.name}[{'x'.join(map(str, t.shape))}]{' masked' if t.masked else ''}"
                        for t in spec.observation.tensors)
    heads = ", ".join(f"{h.name} discrete({h.num_actions}{', legal mask' if h.has_legal_mask else ''})"
                      if isinstance(h, DiscreteHead) else f"{h.name} box{list(h.low)}..{list(h.high)}"
                      for h in spec.action.heads)
    extras = (f", stats {list(spec.episode_stats)}" if spec.episode_stats else "") + (
        f", teams {list(spec.seat_team)}" if spec.seat_team else "") + (
        f", return bound {spec.return_bound:g}" if spec.return_bound else "")
    return (f"{spec.env_name!r} (protocol v2): observation {{{tensors}}}, action {{{heads}}}, "
            f"{spec.num_envs} envs x {spec.num_seats} seats{extras}")


def say(message: str) -> None:
    """A timestamped line on stdout, flushed at once (the fake host's whole output)."""
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def describe_session(session: FakeSession) -> str:
    """Steps, episodes and mean return of a session, for its closing summary."""
    returns = np.asarray(session.episode_returns, np.float64)
    mean = f", mean return {returns.mean(axis=0).round(3).tolist()}" if returns.size else ""
    return (
        f"{session.steps} steps ({session.env_steps} env steps), {session.episodes} episodes ended{mean}"
    )


class LoggingFakeBackend(FakeBackend):
    """FakeBackend that prints sessions opening and closing and every refused message as it happens."""

    def open_session(self, spec: NamedEnvSpec, worker_name: str) -> str:
        try:
            session_id = super().open_session(spec, worker_name)
        except ProtocolError as error:
            say(f"VIOLATION handshake of {worker_name!r}: {error.code}: {error.message}")
            raise
        say(f"session {session_id} opened by {worker_name!r}: {describe_spec(spec)}")
        return session_id

    def attach(self, session_id: str) -> None:
        try:
            super().attach(session_id)
        except ProtocolError as error:
            say(f"VIOLATION stream of session {session_id!r}: {error.code}: {error.message}")
            raise

    async def step(self, step: NamedStepBatch):
        try:
            check_message_size(self, step)
            return await super().step(step)
        except ProtocolError as error:
            say(f"VIOLATION session {step.session_id} step {step.sequence}: {error.code}: {error.message}")
            raise

    def close_session(self, session_id: str, reason: str) -> None:
        super().close_session(session_id, reason)
        session = next((s for s in self.sessions if s.session_id == session_id), None)
        if session is not None:
            say(f"session {session_id} closed ({reason}): {describe_session(session)}")


def check_message_size(backend: FakeBackend, step: NamedStepBatch) -> None:
    """Refuse (and record in `backend.violations`) a StepBatch larger than the limit the handshake reply announced,
    its size as re-encoded: as the v1 message a spec v1 can say (one tensor, one discrete head, no stats or
    teams) travels in, else as v2's. A backend served by `FakeHostServer` calls this first in its `step`."""
    session = backend.session(step.session_id)
    v1 = session is not None and v1_of_named(session.spec) is not None and not step.final_observation
    size = (codec.encode_named_step(step) if v1 else codec_v2.encode_step(step)).ByteSize()
    if size > backend.max_message_bytes:
        message = (f"StepBatch of {size} bytes is larger than this host accepts ({backend.max_message_bytes} bytes, "
                   "max_message_bytes in the handshake reply): step fewer envs per message")
        backend.violations.append(f"{step.session_id}: {RESOURCE_EXHAUSTED}: {message}")
        raise ProtocolError(RESOURCE_EXHAUSTED, message)


class FakeHostServer(ThreadedServer):
    """The fake host's server: the real EnvService over `backend`, taking messages up to TRANSPORT_HEADROOM bytes
    beyond the backend's limit from gRPC so that the backend (`check_message_size`) refuses and reports those
    above it. Restartable on the same port, as `ServerThread`."""

    def __init__(self, backend: FakeBackend, address: str, security: ServerSecurity = ServerSecurity()):
        transport = min(MAX_TRANSPORT_BYTES, backend.max_message_bytes + TRANSPORT_HEADROOM)
        super().__init__(address, lambda: [EnvServicer(backend).register], SERVICE_NAMES, transport, security,
                         thread_name="seedleague-fake-host")
        self.backend = backend


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The fake host's flags; `config_from_args` maps them onto a FakeHostConfig."""
    defaults = FakeHostConfig()
    parser.add_argument("--address", default=DEFAULT_ADDRESS, help="host:port to serve on (default %(default)s; port 0 picks one)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of the random actions")
    parser.add_argument(
        "--max-message-bytes", type=int, default=defaults.max_message_bytes, help="largest StepBatch accepted"
    )
    parser.add_argument(
        "--observation-shape",
        type=_shape,
        default=None,
        help="refuse other observation shapes at handshake, as a model would; e.g. 4 or 84,84,4",
    )
    parser.add_argument("--num-actions", type=int, default=None, help="refuse other action counts at handshake")
    add_security_flags(parser, "server")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the `fake-host` subcommand on an argparse subparsers object."""
    return subcommand.register(subparsers, "fake-host", "serve random legal actions to env workers and print every protocol violation", __doc__,
                               add_arguments)


def config_from_args(args: argparse.Namespace) -> FakeHostConfig:
    """FakeHostConfig from the flags of `add_arguments`; raises ValueError naming what to change."""
    return FakeHostConfig(
        seed=args.seed,
        max_message_bytes=args.max_message_bytes,
        observation_shape=args.observation_shape,
        num_actions=args.num_actions,
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM; 0 when stopped, 2 for a bad flag or an address in use."""
    try:
        config = config_from_args(args)
        security = server_security_from_args(args)
    except ValueError as error:
        print(f"seedleague fake-host: {error}", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:  # Servicer-level refusals (undecodable messages) are logged.
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    read_fd, write_fd = os.pipe()
    previous = {signum: signal.signal(signum, lambda signum, frame: os.write(write_fd, bytes([signum])))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _serve(config, args.address, security, read_fd)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(read_fd)
        os.close(write_fd)


def _serve(config: FakeHostConfig, address: str, security: ServerSecurity, signal_fd: int) -> int:
    """Serve until a signal number arrives on `signal_fd` (written by the signal handler)."""
    server = FakeHostServer(LoggingFakeBackend(config), address, security)
    try:
        server.start()
    except Exception as error:  # grpc raises RuntimeError for an address in use or unparsable
        print(f"seedleague fake-host: cannot serve on {address}: {error}", file=sys.stderr)
        return 2
    say(f"fake host serving protocol v{PROTOCOL_VERSION} and v{PROTOCOL_VERSION_V2} on {server.address} (Ctrl-C or SIGTERM to stop)")
    try:
        signum = os.read(signal_fd, 1)[0]
        say(f"got {signal.Signals(signum).name}: stopping")
    finally:
        server.stop(grace=1.0)
    backend = server.backend
    say(f"stopped after {len(backend.sessions)} sessions, {len(backend.violations)} violations")
    return 0


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be comma-separated integers like 84,84,4, got {text!r}") from None
    if not shape or any(d < 1 for d in shape):
        raise argparse.ArgumentTypeError(f"shape needs one or more dimensions >= 1, got {text!r}")
    return shape


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m seedleague.tools.fake_host`, the same command without the seedleague CLI."""
    return subcommand.standalone_main("fake-host", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
