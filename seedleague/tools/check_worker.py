"""`seedleague check-worker`: run an env worker against a checking fake host and
report, check by check, whether it speaks the protocol.

    seedleague check-worker [--timeout S] [--steps N] -- <worker command ...>

The worker finds the host through the literal `{address}` in its arguments
(replaced by host:port) or the SEEDLEAGUE_ADDRESS environment variable. The
checker serves a `CheckingBackend` (a FakeBackend that remembers every refused
message with its sequence number), then, in order:

  1. waits for a handshake and `--steps` clean steps of the first session;
  2. stops the host and restarts it on the same port, and waits for the worker
     to handshake a new session and step it;
  3. sends the worker SIGTERM and waits for exit status 0.

Each check prints PASS, FAIL or SKIP with the first offending message. The
command exits 0 when every check passes, 1 otherwise, 2 for usage errors. This
module owns the checks, the report and the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from typing import Callable, Optional, Sequence

import numpy as np

from seedleague import subcommand
from seedleague.host import results
from seedleague.launch import ADDRESS_ENV, ADDRESS_PLACEHOLDER
from seedleague.launch.child import Child, ChildExited, ChildNotReady
from seedleague.protocol.errors import ProtocolError
from seedleague.protocol.named import NamedActionBatch, NamedEnvSpec, NamedStepBatch
from seedleague.testing.fakes import FakeBackend, FakeHostConfig
from seedleague.tools.fake_host import FakeHostServer, check_message_size, describe_spec

OUTPUT_LINES = 40  # of the worker's output, in the report

HANDSHAKE = "handshake"
STREAM = "stream"
OBSERVATIONS = "observations"
REWARDS = "rewards and flags"
LEGAL_MASKS = "legal masks"
EPISODES = "episodes reset"
RETURN_BOUND = "return bound"
RECONNECT = "reconnect"
SHUTDOWN = "clean shutdown"
CHECKS = (HANDSHAKE, STREAM, OBSERVATIONS, REWARDS, LEGAL_MASKS, EPISODES, RETURN_BOUND, RECONNECT, SHUTDOWN)

# Which check a refused message belongs to, by the first field its error names.
_FIELD_CHECKS = {  # the StepBatch field a refusal names (ProtocolError.field) -> the check it fails
    "legal_mask": LEGAL_MASKS,
    "acting": LEGAL_MASKS,
    "observation": OBSERVATIONS,
    "reward": REWARDS,
    "terminated": REWARDS,
    "truncated": REWARDS,
    "final_observation": OBSERVATIONS,  # v2: fields name "<field>/<tensor>"; the part before "/" picks the check
    "episode_stats": REWARDS,
}


@dataclasses.dataclass(frozen=True)
class CheckConfig:
    """How long and how far to exercise a worker."""

    steps: int = 200  # clean steps of the first session before the host restart; an episode must end within them
    timeout_s: float = 30.0  # deadline of each phase: handshake + steps, then reconnect + resume
    shutdown_timeout_s: float = 10.0  # SIGTERM to exit
    resume_steps: int = 3  # steps of the new session that count as "resumed stepping"
    seed: int = 0  # of the random actions

    def __post_init__(self):
        problems = []
        if self.steps < 2:
            problems.append(f"steps must be >= 2, got {self.steps}")
        if self.timeout_s <= 0:
            problems.append(f"timeout must be > 0 seconds, got {self.timeout_s}")
        if self.shutdown_timeout_s <= 0:
            problems.append(f"shutdown timeout must be > 0 seconds, got {self.shutdown_timeout_s}")
        if self.resume_steps < 1:
            problems.append(f"resume_steps must be >= 1, got {self.resume_steps}")
        if problems:
            raise ValueError("bad check-worker config: " + "; ".join(problems))


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One named check: PASS, FAIL or SKIP (could not be run; counts as not passed)."""

    name: str
    status: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def line(self) -> str:
        return f"{self.status} {self.name}: {self.detail}"


@dataclasses.dataclass(frozen=True)
class Report:
    """What `check_worker` found: the spec the worker declared, one result per check, its output tail."""

    command: tuple[str, ...]
    spec: Optional[NamedEnvSpec]  # as the worker declared it
    results: tuple[CheckResult, ...]
    worker_output: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    def result(self, name: str) -> CheckResult:
        return next(result for result in self.results if result.name == name)

    @property
    def failed(self) -> list[str]:
        """Names of the checks that did not pass, in check order."""
        return [result.name for result in self.results if not result.passed]

    def format(self) -> str:
        lines = [f"check-worker: {' '.join(self.command)}"]
        lines.append(f"spec: {describe_spec(self.spec)}" if self.spec else "spec: none (no successful handshake)")
        lines += [result.line() for result in self.results]
        if self.passed:
            lines.append(f"all {len(self.results)} checks passed")
        else:
            lines.append(f"{len(self.failed)} of {len(self.results)} checks did not pass: {', '.join(self.failed)}")
            lines.append(f"worker output (last {len(self.worker_output)} lines):")
            lines += [f"  | {line}" for line in self.worker_output]
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Violation:
    """A message the checking host refused."""

    where: str  # session id, or "handshake"
    sequence: Optional[int]  # the refused StepBatch's sequence, when known
    code: str
    message: str
    field: Optional[str] = None  # the field at fault, from ProtocolError.field; None: the stream as a whole

    @property
    def check(self) -> str:
        if self.where == HANDSHAKE:
            return HANDSHAKE
        return _FIELD_CHECKS.get((self.field or "").split("/")[0], STREAM)

    def describe(self) -> str:
        step = f"step {self.sequence}" if self.sequence is not None else "a message"
        where = "handshake" if self.where == HANDSHAKE else f"{step} of session {self.where}"
        return f"{where}: {self.code}: {self.message}"


class CheckingBackend(FakeBackend):
    """FakeBackend that keeps every violation with its step, and the first episode end."""

    def __init__(self, config: FakeHostConfig):
        super().__init__(config)
        self.found: list[Violation] = []
        self.first_episode_end: Optional[tuple[str, int, int]] = None  # session, sequence, env
        self._found_lock = threading.Lock()

    def add(self, violation: Violation) -> None:
        with self._found_lock:
            if not any(v.where == violation.where and v.message == violation.message for v in self.found):
                self.found.append(violation)

    def violations_of(self, check: str) -> list[Violation]:
        with self._found_lock:
            return [v for v in self.found if v.check == check]

    def open_session(self, spec: NamedEnvSpec, worker_name: str) -> str:
        try:
            return super().open_session(spec, worker_name)
        except ProtocolError as error:
            self.add(Violation(HANDSHAKE, None, error.code, error.message))
            raise

    def attach(self, session_id: str) -> None:
        try:
            super().attach(session_id)
        except ProtocolError as error:
            self.add(Violation(session_id, 0, error.code, error.message, error.field))
            raise

    async def step(self, step: NamedStepBatch) -> NamedActionBatch:
        try:
            check_message_size(self, step)
            actions = await super().step(step)
        except ProtocolError as error:
            self.add(Violation(step.session_id, step.sequence, error.code, error.message, error.field))
            raise
        ended = step.terminated | step.truncated
        if step.sequence > 0 and ended.any() and self.first_episode_end is None:
            self.first_episode_end = (step.session_id, step.sequence, int(ended.argmax()))
        return actions


class ServicerRefusals(logging.Handler):
    """Collects refusals the servicer makes before the backend sees a message.

    Those are handshakes with the wrong protocol version or an undecodable spec,
    and StepBatches that do not decode (missing tensor, wrong byte count). The
    servicer logs each one at WARNING; refusals the backend made are already
    recorded and are dropped here as duplicates.
    """

    LOGGER = "seedleague.host.servicer"

    def __init__(self, backend: CheckingBackend):
        super().__init__(logging.WARNING)
        self._backend = backend

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg.startswith("refused handshake") and len(args) == 2:
            self._backend.add(Violation(HANDSHAKE, None, "refused", str(args[1])))
        elif record.msg.startswith("ending stream") and len(args) == 2:
            code, _, message = str(args[1]).partition(": ")
            field = getattr(record, "field", None)  # the servicer logs the refusal's ProtocolError.field
            if args[0] is None:  # The stream's first message did not decode: its session is unknown.
                self._backend.add(Violation("(first message, session unknown)", 0, code, message, field))
            else:
                self._backend.add(Violation(str(args[0]), _accepted_steps(self._backend, args[0]), code, message,
                                            field))

    def __enter__(self) -> "ServicerRefusals":
        logging.getLogger(self.LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc_info) -> None:
        logging.getLogger(self.LOGGER).removeHandler(self)


def _accepted_steps(backend: FakeBackend, session_id: str) -> Optional[int]:
    """The sequence the session's next message should carry: the refused one, in lockstep."""
    session = next((s for s in backend.sessions if s.session_id == session_id), None)
    return None if session is None else session.steps


def start_worker(command: Sequence[str], address: str, log_dir: str) -> Child:
    """The worker under test, `{address}` in its command replaced (and in $SEEDLEAGUE_ADDRESS), its output in
    <log_dir>/worker.log. Raises OSError if it cannot start."""
    argv = [part.replace(ADDRESS_PLACEHOLDER, address) for part in command]
    worker = Child(argv, os.path.join(log_dir, "worker.log"), name="the worker", env=dict(os.environ, **{ADDRESS_ENV: address}))
    worker.start()
    return worker


def _wait(done: Callable[[], bool], worker: Child, backend: CheckingBackend, timeout_s: float) -> str:
    """"done", or why waiting stopped first: "violation", "exited" or "timeout"."""
    try:
        return worker.wait_until(lambda: "done" if done() else "violation" if backend.found else None, timeout_s,
                                 "the check")
    except ChildExited:
        return "exited"
    except ChildNotReady:
        return "timeout"


def _stopped_because(outcome: str, worker: Child, backend: CheckingBackend, timeout_s: float) -> str:
    if outcome == "violation":
        return f"the host refused {backend.found[0].describe()}"
    if outcome == "exited":
        return f"the worker exited with code {worker.poll()}"
    return f"nothing more happened within {timeout_s:g} s"


def check_worker(command: Sequence[str], config: CheckConfig = CheckConfig()) -> Report:
    """Run `command` against a checking fake host and check it. Raises OSError if it cannot start."""
    if not command:
        raise ValueError("no worker command given: put it after `--`")
    backend = CheckingBackend(FakeHostConfig(seed=config.seed))
    with (ServicerRefusals(backend), FakeHostServer(backend, "127.0.0.1:0") as server,
          tempfile.TemporaryDirectory(prefix="check-worker-") as log_dir):
        worker = start_worker(command, server.address, log_dir)
        try:
            results = _run_checks(backend, server, worker, config)
        finally:
            worker.kill()
        output = worker.output().splitlines()[-OUTPUT_LINES:]
    sessions = backend.sessions
    spec = sessions[0].spec if sessions else None
    return Report(tuple(command), spec, tuple(results), tuple(output))


def _run_checks(
    backend: CheckingBackend, server: FakeHostServer, worker: Child, config: CheckConfig
) -> list[CheckResult]:
    def first_session_stepped() -> bool:
        sessions = backend.sessions
        return bool(sessions) and sessions[0].steps >= config.steps

    outcome = _wait(first_session_stepped, worker, backend, config.timeout_s)
    why = _stopped_because(outcome, worker, backend, config.timeout_s)
    handshake = _check_handshake(backend, why)
    episodes = _check_episodes(backend, config, outcome, why)
    bound = _check_return_bound(backend)
    if outcome == "violation":  # A refused worker should give up on its own: let it, before SIGTERM.
        worker.wait(config.shutdown_timeout_s)
    reconnect = _check_reconnect(backend, server, worker, config) if outcome == "done" else _skip(
        RECONNECT, f"needs {config.steps} clean steps first; {why}"
    )
    shutdown = _check_shutdown(worker, config)
    data = [_check_data(backend, name) for name in (STREAM, OBSERVATIONS, REWARDS, LEGAL_MASKS)]
    return [handshake, *data, episodes, bound, reconnect, shutdown]


def _skip(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "SKIP", detail)


def _check_handshake(backend: CheckingBackend, why: str) -> CheckResult:
    sessions = backend.sessions
    refused = backend.violations_of(HANDSHAKE)
    if sessions:
        session = sessions[0]
        return CheckResult(
            HANDSHAKE, "PASS", f"protocol v{session.protocol_version}, session {session.session_id} for "
            f"{describe_spec(session.spec)}"
        )
    if refused:
        return CheckResult(HANDSHAKE, "FAIL", f"refused {refused[0].message}")
    return CheckResult(HANDSHAKE, "FAIL", f"no handshake: {why}")


def _check_data(backend: CheckingBackend, name: str) -> CheckResult:
    """A per-step check: its first refused message over all sessions, or how many steps passed."""
    sessions = backend.sessions
    if not sessions:
        return _skip(name, "no session was opened")
    found = backend.violations_of(name)
    if found:
        return CheckResult(name, "FAIL", found[0].describe())
    steps = sum(session.steps for session in sessions)
    detail = f"{steps} steps over {len(sessions)} session{'s' if len(sessions) > 1 else ''} checked"
    if name == LEGAL_MASKS and not sessions[0].spec.has_legal_mask:
        detail = f"not declared (has_legal_mask=false) and none sent in {steps} steps"
    return CheckResult(name, "PASS", detail)


def _check_episodes(backend: CheckingBackend, config: CheckConfig, outcome: str, why: str) -> CheckResult:
    ended = backend.first_episode_end
    if ended is not None and ended[1] <= config.steps:
        session, sequence, env = ended
        return CheckResult(EPISODES, "PASS", f"first episode ended at step {sequence} of session {session} (env {env})")
    sessions = backend.sessions
    if not sessions:
        return _skip(EPISODES, "no session was opened")
    session = sessions[0]
    seen = f"{session.steps} steps of {session.spec.num_envs} envs"
    if outcome == "done":
        return CheckResult(
            EPISODES, "FAIL",
            f"no env reported terminated or truncated in {seen} (--steps {config.steps}); episodes must end, "
            "and the StepBatch after the ending action must set the flag",
        )
    if outcome == "violation":
        return _skip(EPISODES, f"no episode ended in the {seen} observed before {why}")
    return CheckResult(EPISODES, "FAIL", f"no episode ended in the {seen} observed before {why}")


def _check_return_bound(backend: CheckingBackend) -> CheckResult:
    """Every ended episode's return, per seat, within the spec's declared return_bound (passes when none is
    declared: the bound is optional)."""
    sessions = backend.sessions
    if not sessions:
        return _skip(RETURN_BOUND, "no session was opened")
    bound, episodes = sessions[0].spec.return_bound, sum(session.episodes for session in sessions)
    if not bound:
        return CheckResult(RETURN_BOUND, "PASS", "not declared (return_bound 0): a league run learns the rewards as "
                           "sent; declare the largest absolute return of one seat in an episode where the game knows it")
    if not episodes:
        return _skip(RETURN_BOUND, f"declared {bound:g}, but no episode ended")
    largest = max(session.largest_return for session in sessions)
    problem = results.beyond_return_bound(sessions[0].spec, np.array([largest]))
    if problem:
        return CheckResult(RETURN_BOUND, "FAIL", f"episodes go beyond the declared return_bound {bound:g}: {problem}")
    return CheckResult(RETURN_BOUND, "PASS", f"{episodes} episodes, the largest |return| {largest:g} within the "
                       f"declared {bound:g}")


def _check_reconnect(
    backend: CheckingBackend, server: FakeHostServer, worker: Child, config: CheckConfig
) -> CheckResult:
    """Restart the host on the same port; the worker must handshake anew and step the new session."""
    before = len(backend.sessions)
    server.stop(grace=0)
    server.start()
    started = time.monotonic()

    def resumed() -> bool:
        sessions = backend.sessions
        return len(sessions) > before and sessions[-1].steps >= config.resume_steps

    outcome = _wait(resumed, worker, backend, config.timeout_s)
    took = time.monotonic() - started
    if outcome == "done":
        session = backend.sessions[-1]
        return CheckResult(RECONNECT, "PASS", f"new session {session.session_id} stepping {took:.1f} s after the host restart")
    if outcome == "exited":
        return CheckResult(
            RECONNECT, "FAIL",
            f"the worker exited with code {worker.poll()} {took:.1f} s after the host restarted, instead of "
            "reconnecting with backoff",
        )
    if outcome == "violation":
        return CheckResult(RECONNECT, "FAIL", f"after the restart the host refused {backend.found[0].describe()}")
    new = len(backend.sessions) - before
    return CheckResult(
        RECONNECT, "FAIL",
        f"no new session with {config.resume_steps} steps within {config.timeout_s:g} s of the host restart "
        f"({new} new sessions opened)",
    )


def _check_shutdown(worker: Child, config: CheckConfig) -> CheckResult:
    code = worker.poll()
    if code is not None:
        return _skip(SHUTDOWN, f"the worker had already exited with code {code}")
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)  # the worker alone, as a supervisor stops it
    code = worker.wait(config.shutdown_timeout_s)
    took = time.monotonic() - started
    if code is None:
        return CheckResult(SHUTDOWN, "FAIL", f"still running {config.shutdown_timeout_s:g} s after SIGTERM (killed)")
    if code != 0:
        return CheckResult(SHUTDOWN, "FAIL", f"exited with code {code} {took:.1f} s after SIGTERM; expected 0")
    return CheckResult(SHUTDOWN, "PASS", f"exited 0 {took:.1f} s after SIGTERM")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """check-worker's flags; `config_from_args` maps them onto a CheckConfig."""
    defaults = CheckConfig()
    parser.add_argument("--steps", type=int, default=defaults.steps,
                        help="clean steps before the host restart; an episode must end within them (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=defaults.timeout_s,
                        help="seconds allowed for each phase: handshake + steps, reconnect (default %(default)s)")
    parser.add_argument("--shutdown-timeout", type=float, default=defaults.shutdown_timeout_s,
                        help="seconds from SIGTERM to exit (default %(default)s)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seed of the random actions")
    parser.add_argument("worker_command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the worker to run; {address} in it becomes host:port (also in $SEEDLEAGUE_ADDRESS)")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the `check-worker` subcommand on an argparse subparsers object."""
    return subcommand.register(subparsers, "check-worker", "run an env worker against a fake host and check that it speaks the protocol", __doc__,
                               add_arguments)


def config_from_args(args: argparse.Namespace) -> CheckConfig:
    return CheckConfig(steps=args.steps, timeout_s=args.timeout, shutdown_timeout_s=args.shutdown_timeout, seed=args.seed)


def run(args: argparse.Namespace) -> int:
    """Print the report; 0 all checks passed, 1 some did not, 2 usage error."""
    command = list(args.worker_command)
    if command[:1] == ["--"]:
        command = command[1:]
    try:
        config = config_from_args(args)
        if not command:
            raise ValueError("no worker command: put it after `--`, e.g. -- ./my_worker --address {address}")
        report = check_worker(command, config)
    except ValueError as error:
        print(f"seedleague check-worker: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"seedleague check-worker: cannot start {command[0]!r}: {error}", file=sys.stderr)
        return 2
    print(report.format(), flush=True)
    return 0 if report.passed else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m seedleague.tools.check_worker`, the same command without the seedleague CLI."""
    return subcommand.standalone_main("check-worker", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
