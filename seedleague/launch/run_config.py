"""What a run is, before anything starts: its workers (`WorkerSpec`), when it ends (`Budget`) and the whole run
(`RunConfig`), which seedleague.launch.local runs. Jax-free, as every component's config is (the *_config modules):
`seedleague train` builds and refuses a RunConfig without loading the host. How many built-in workers fit the
machine (`Machine`, `machine_share`) is decided here too, from what local.run measures once the host's devices are
known.

    config = RunConfig(run_dir="runs/x", host=HostConfig(), workers=WorkerSpec(4, command),
                       budget=Budget(max_seconds=60))
    summary = seedleague.launch.local.run(config)
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

from seedleague.artifacts.output_config import OutputConfig
from seedleague.host.config import HostConfig
from seedleague.launch import ADDRESS_PLACEHOLDER
from seedleague.metrics import Metrics
from seedleague.security import ServerSecurity

if TYPE_CHECKING:  # a name only: seedleague.launch.league loads the league's page and service, no config's business
    from seedleague.launch.league import LeagueSpec


@dataclasses.dataclass(frozen=True)
class Budget:
    """When a run ends: whichever limit is reached first (0 / None = no limit)."""

    max_env_steps: int = 0
    max_learner_steps: int = 0  # total updates of the train state (continues across --resume)
    max_seconds: float = 0.0
    target_return: Optional[float] = None  # mean return over the last 100 episodes
    target_episodes: int = 100  # episodes the mean needs before the target counts

    def __post_init__(self):
        for flag, value in (("--max-steps", self.max_env_steps), ("--max-learner-steps", self.max_learner_steps),
                            ("--max-seconds", self.max_seconds)):
            if not value >= 0:  # NaN too
                raise ValueError(f"{flag} must be >= 0 (0: no limit), got {value:g}")

    def reached(self, metrics: Metrics, learner_step: int, elapsed_s: float) -> Optional[str]:
        if self.max_env_steps and metrics.env_steps >= self.max_env_steps:
            return f"reached {self.max_env_steps} env steps"
        if self.max_learner_steps and learner_step >= self.max_learner_steps:
            return f"reached {self.max_learner_steps} learner steps"
        if self.max_seconds and elapsed_s >= self.max_seconds:
            return f"reached {self.max_seconds:g} s"
        if self.target_return is not None and len(metrics.returns) >= self.target_episodes:
            mean = metrics.mean_return()
            if mean >= self.target_return:
                return f"mean return {mean:.1f} over the last {len(metrics.returns)} episodes reached the target {self.target_return:g}"
        return None


SEED_PLACEHOLDER = "{seed}"  # in a --worker-cmd: a seed distinct per worker and per restart
# ADDRESS_PLACEHOLDER ("{address}") in a --worker-cmd and ADDRESS_ENV in every worker's environment: the host's
# host:port, as `seedleague check-worker` gives them.


HOST_CPUS = 2  # CPUs each host on the machine keeps for itself: its gRPC server, batching and learner threads


@dataclasses.dataclass(frozen=True)
class Machine:
    """What a run's built-in worker count is fitted to: the JAX platform its host's inference and learner run on
    ("cpu", "gpu", "tpu", ...) and the CPUs the run may use (seedleague.launch.cpus.usable_cpus)."""

    platform: str
    cpus: int

    @property
    def accelerated(self) -> bool:
        return self.platform != "cpu"


def machine_share(floor: int, machine: Machine, hosts: int = 1) -> int:
    """Built-in workers for each of `hosts` hosts on `machine`, never fewer than `floor` (the preset's).

    On an accelerator the CPUs are the workers' but HOST_CPUS per host, split evenly among the hosts; on a
    CPU-only machine `floor`: the learner and inference run on the same cores as the workers, which is how
    the presets were measured.
    """
    if not machine.accelerated:
        return floor
    return max(floor, (machine.cpus - HOST_CPUS * hosts) // max(hosts, 1))


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """The env workers `run` starts and keeps alive.

    Built-in workers: `count` processes of `command`, with --address and --seed appended.
    Any other worker binary (`seedleague train --worker-cmd`): worker i runs `templates[i % len]`,
    an argv in which `{address}` and `{seed}` are replaced and nothing is appended.
    With `fit_machine` (built-in workers whose count nobody gave), `count` is the least: `run` raises it
    to the machine's share (`fitted`) once the host's devices are known.
    """

    count: int = 0
    command: tuple[str, ...] = ()
    templates: tuple[tuple[str, ...], ...] = ()
    max_restarts: int = 10
    fit_machine: bool = False

    def __post_init__(self):
        if self.count < 0:
            raise ValueError(f"worker count must be >= 0, got {self.count}")
        if self.count and not (self.command or self.templates):
            raise ValueError("workers need a command: a built-in worker's or a --worker-cmd")
        if self.fit_machine and self.templates:
            raise ValueError("a --worker-cmd's count is the one given: only built-in workers are fitted to the machine")

    def fitted(self, machine: Machine, hosts: int = 1) -> tuple[WorkerSpec, str]:
        """This spec with its count for `machine` (one of `hosts` hosts on it), and the console line that says
        the count, why, and how to choose another ("" for a spec that is not fitted)."""
        if not self.fit_machine:
            return self, ""
        count = machine_share(self.count, machine, hosts)
        each = f"each of the {hosts} hosts" if hosts > 1 else "the host"
        kept = f"{machine.cpus} usable CPUs less {HOST_CPUS} for {each}" + (", shared" if hosts > 1 else "")
        if not machine.accelerated:
            why = ("the preset's: the learner and inference run on this machine's CPUs beside the workers, as the "
                   "presets were measured")
        elif count > self.count:
            why = f"{kept}, since {each} runs on {machine.platform}; the preset's {self.count} suit a CPU-only machine"
        else:
            why = f"the preset's: {each} runs on {machine.platform}, and {kept} leave no more"
        line = f"env workers: {count} ({why}); --workers N sets the count"
        return dataclasses.replace(self, count=count, fit_machine=False), line

    def argv(self, index: int, address: str, seed: int) -> list[str]:
        """Worker `index`'s command line for a host on `address`."""
        if not self.templates:
            return list(self.command) + ["--address", address, "--seed", str(seed)]
        template = self.templates[index % len(self.templates)]
        return [arg.replace(ADDRESS_PLACEHOLDER, address).replace(SEED_PLACEHOLDER, str(seed)) for arg in template]


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A whole run: host, workers, budget and where outputs go."""

    run_dir: str
    host: HostConfig = HostConfig()
    workers: WorkerSpec = WorkerSpec()
    budget: Budget = Budget()
    resume: bool = False
    start_if_none: bool = False  # with `resume`: start a new run when the run dir holds no checkpoint
    security: ServerSecurity = ServerSecurity()  # token and TLS of the host's server (workers get the same)
    report_interval_s: float = 2.0
    budget_check_interval_s: float = 0.1  # a run stops this soon after its budget or target return is reached
    switch_interval_ms: float = 0.5  # Python GIL switch interval in the host process
    league: Optional[LeagueSpec] = None  # two-player games: the league this run's host plays in
    env_id: str = ""  # what the extra league players' hosts train on
    output: Optional[OutputConfig] = None  # the run's output, recorded in <run_dir>/output.json at its start
    # seconds after the budget that `seedleague train` spends choosing the output by best responses (--choose-share)
    choose_output_s: float = 0.0
