"""HostConfig: everything the training host needs, one config per component, checked together.

Each component owns its own config (BatcherConfig, ReplayConfig, NetworkConfig, LearnerConfig,
CheckpointConfig, LeagueLinkConfig, SessionLimits, the device split); this class composes them
and refuses combinations that cannot work, naming the flags to change. `seedleague train` and
`seedleague host` expose every field as a flag (seedleague.config_flags).
"""

from __future__ import annotations

import dataclasses

from seedleague.checkpoint_config import CheckpointConfig
from seedleague.host.batcher import BatcherConfig
from seedleague.host.league_link_config import LeagueLinkConfig
from seedleague.host.replay_config import ReplayConfig
from seedleague.host.session_limits import SessionLimits
from seedleague.rl.device_config import DeviceConfig, DistributedConfig
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.network_config import NetworkConfig


UNIFORM = "uniform"  # exploit_source's uniform random policy in the run's network (`seedleague exploit --output uniform`)
# A best response ends at this many times its time budget even where it has not made its updates
# (exploit_read_out_updates) or its read-out holds no estimate yet: an output that serves this much slower is measured
# by an under-trained response, and a read-out with too few games gives none
UPDATES_TIME_CAP = 8
# A best response's estimate (seedleague.host.exploit) is a normal interval, read only from this many games of each team
# on (the usual floor for the central limit theorem): from two games of one outcome a team's sample variance is 0, and
# a response on chess claimed -1.0000 +- 0.0000.
MIN_TEAM_GAMES = 30


@dataclasses.dataclass(frozen=True)
class HostConfig:
    """Everything the training host needs; composed of one config per component."""

    address: str = "127.0.0.1:0"  # where the host listens for workers ("host:port"; port 0: any free one)
    max_message_bytes: int = 64 * 2**20  # the largest gRPC message the host takes from a worker
    unroll_length: int = 20  # env steps per unroll (trajectory piece) the learner trains on
    batch_size: int = 32  # unrolls per learner update
    seed: int = 0  # seeds the params, the action sampling and the learner
    learn: bool = True  # False: inference only (no unrolls, replay or learner), e.g. for serving or benchmarks
    greedy: bool = False  # act with the most probable legal action instead of sampling (evaluation, serving)
    serve_param_average: bool = False  # serving: act with the checkpoint's param average (LearnerConfig.average_from)
    # serving: act with this run directory's output (seedleague.output); a mixture draws one member per env per
    # episode and plays the whole episode with it (`seedleague serve --checkpoint RUN_DIR` sets it for mixtures)
    serve_output: str = ""
    # serving: with serve_output, play evaluation games among that run's newest this many snapshots and its param
    # average instead of its output, each seat's member drawn uniformly per episode, every game scored by every
    # member: the sampled meta-game (seedleague.host.population); 0: serve the output
    population_size: int = 0
    # with population_size: the run directories of learned best responses (`seedleague exploit`) that join the
    # evaluation games as opponents only, so the members' mix is solved against them too (one step of PSRO)
    population_responses: tuple[str, ...] = ()
    # with population_size: keep a uniform sample of this many of the games' moves (each state, every member's policy
    # and reach there), written to population_samples.npz in the run directory when the host stops: what the
    # `distilled` output is fitted to (seedleague.host.population_samples); 0: none
    population_samples: int = 0
    # training a best response (`seedleague exploit`): the learner's only opponent is this run directory's output,
    # frozen (a mixture's members drawn per episode by weight), and the learner's returns against it are tallied
    exploit_output: str = ""
    exploit_source: str = ""  # which of that run's outputs (seedleague.output.SOURCES), or UNIFORM; "": the one it recorded
    # training a best response: after this many seconds of the run's clock its learner stops and its rows act
    # greedily, so the games after that measure one fixed pure response (seedleague.host.exploit); 0: never
    exploit_read_out_s: float = 0.0
    # training a best response: after this many learner updates instead (equal training for responses to outputs
    # that serve at different speeds: `seedleague exploit --response-updates`); 0: never
    exploit_read_out_updates: int = 0
    # with either read-out: the run ends once its read-out has lasted this many seconds and holds an estimate
    exploit_read_out_length_s: float = 0.0
    # training: each learner action is a uniformly random legal one with this probability, recorded as the
    # mixture policy so V-trace corrects for it; in self-play it keeps lines the policy has stopped playing
    # in the data, so the responses to them are still trained (see docs/league.md)
    explore: float = 0.0
    limits: SessionLimits = SessionLimits()
    batcher: BatcherConfig = BatcherConfig()
    replay: ReplayConfig = ReplayConfig()
    network: NetworkConfig = NetworkConfig()
    learner: LearnerConfig = LearnerConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    league: LeagueLinkConfig = LeagueLinkConfig()
    devices: DeviceConfig = DeviceConfig()  # learner / inference devices (Sebulba split)
    distributed: DistributedConfig = DistributedConfig()  # several processes, one learner

    def __post_init__(self):
        if self.unroll_length < 1:
            raise ValueError(f"unroll_length must be >= 1, got {self.unroll_length}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.replay.capacity < self.batch_size:
            raise ValueError(f"replay capacity {self.replay.capacity} must be >= batch_size {self.batch_size}")
        self.replay.error_buffer_for(self.batch_size)  # raises where the limiter's slack would stall the run
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")
        if self.serve_param_average and self.learn:
            raise ValueError("serve_param_average applies to serving (`seedleague serve`), not to a learning host: "
                             "the learner acts with its params and keeps the average as an output")
        if self.serve_output and (self.learn or self.serve_param_average or self.checkpoint.restore_step is not None):
            raise ValueError("serve_output serves a run's recorded output: it needs --learn false and neither "
                             "--serve-param-average nor --checkpoint.restore-step (the output names its networks)")
        if self.population_size < 0 or (self.population_size and not self.serve_output):
            raise ValueError(f"population_size plays evaluation games among a run's snapshots: it must be >= 0 and "
                             f"needs serve_output (the run), got {self.population_size}")
        if self.population_samples < 0 or (self.population_samples and not self.population_size):
            raise ValueError(f"population_samples keeps moves of evaluation games among a run's snapshots: it must be "
                             f">= 0 and needs population_size, got {self.population_samples}")
        if self.population_responses and not self.population_size:
            raise ValueError("population_responses join evaluation games among a run's snapshots: they need "
                             "population_size (and serve_output)")
        if self.exploit_output and (not self.learn or self.serve_output or self.league.enabled):
            raise ValueError("exploit_output trains a best response to a run's output: it needs a learning host "
                             "(--learn true) outside any league, and no --serve-output")
        if self.exploit_read_out_s < 0 or (self.exploit_read_out_s and not self.exploit_output):
            raise ValueError(f"exploit_read_out_s must be >= 0 and needs exploit_output, got {self.exploit_read_out_s}")
        if self.exploit_read_out_updates < 0 or self.exploit_read_out_length_s < 0:
            raise ValueError("exploit_read_out_updates and exploit_read_out_length_s must be >= 0, got "
                             f"{self.exploit_read_out_updates} and {self.exploit_read_out_length_s}")
        if self.exploit_read_out_updates and (self.exploit_read_out_s or not self.exploit_output
                                              or not self.exploit_read_out_length_s):
            raise ValueError("exploit_read_out_updates starts a best response's read-out at an update count: it needs "
                             "exploit_output and exploit_read_out_length_s (how long the read-out lasts), and no "
                             "exploit_read_out_s (a read-out by the clock)")
        if self.exploit_read_out_length_s and not (self.exploit_read_out_updates or self.exploit_read_out_s):
            raise ValueError("exploit_read_out_length_s is how long a read-out lasts: give exploit_read_out_updates or "
                             "exploit_read_out_s (when it begins) too")
        if self.exploit_source and not self.exploit_output:
            raise ValueError("exploit_source chooses which output of --exploit-output to exploit: give that too")
        if not 0.0 <= self.explore < 1.0:
            raise ValueError(f"explore must be a probability in [0, 1), got {self.explore}")
        if self.explore and (self.greedy or not self.learn):
            raise ValueError("explore applies to a learning host that samples its actions; serving and greedy "
                             "play act with the policy as it is")
        if self.league.enabled and not self.learn:
            raise ValueError("league play needs a learning host: drop --league.address or set --learn true")
        if self.league.enabled and not self.league.pool_dir:
            raise ValueError("league play needs --league.pool-dir: the model pool directory the league's hosts share")
        if self.learn and self.batch_size % self.learner.minibatches:
            raise ValueError(f"batch_size {self.batch_size} does not split into --learner.minibatches "
                             f"{self.learner.minibatches} of whole unrolls: use a multiple of "
                             f"{self.learner.minibatches} (--batch-size) or fewer minibatches")
        learner_devices = self.devices.learner_devices
        if learner_devices and self.batch_size % learner_devices:
            raise ValueError(f"batch_size {self.batch_size} does not split evenly over devices.learner_devices="
                             f"{learner_devices}: use a multiple of {learner_devices} (--batch-size)")
        if self.distributed.enabled and not self.learn:
            raise ValueError("distributed.num_processes > 1 joins processes into one learner, but --learn is false: "
                             "drop the --distributed.* flags")
        if self.distributed.enabled and self.learner.anneal_seconds:
            raise ValueError("an anneal over time (--learner.anneal-seconds) would read a different clock in each "
                             "process of a multi-process learner: anneal over updates (--learner.anneal-steps) instead")
        if self.distributed.enabled and self.league.enabled:
            raise ValueError("league play with a multi-process learner is not supported: drop --distributed.* "
                             "or --league.address")
