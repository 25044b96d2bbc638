"""Where a host's first train state comes from when it does not start fresh.

- `from_checkpoint`: the latest (or a chosen) checkpoint of the run directory, to resume
  training or to serve it (optionally its param average), with the spec, network and learner
  configs it was saved with. A newest checkpoint that cannot be read back or holds NaN/inf is
  passed over for the newest good one (and, when training, set aside as `damaged-<step>`);
  `Restored.note` says which, for the console.
- `from_output`: a finished run's output (seedleague.output): its first member's params, and
  every member as a `ServedMixture` that draws one per episode.
- `exploit_target`: a run's output as the frozen opponent of a best response (seedleague.host.exploit).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import numpy as np

from seedleague import output
from seedleague.checkpoint import Checkpointer, DamagedCheckpoint
from seedleague.checkpoint_meta import CheckpointMeta
from seedleague.host.config import UNIFORM, HostConfig
from seedleague.host import exploit
from seedleague.host.exploit import ExploitTarget
from seedleague.host.population_samples import MoveSamples
from seedleague.host.mixture import ServedMixture
from seedleague.host.policy import stack_params
from seedleague.host.population import PopulationGames
from seedleague.host.pipeline import build_network
from seedleague.protocol.named import NamedEnvSpec
from seedleague.rl.learner import init_train_state

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Restored:
    """A train state to build the pipeline from, the config it needs, and the run's counters so far."""

    config: HostConfig  # with the network (and learner) config the state was saved with
    spec: NamedEnvSpec  # the model's (seedleague.protocol.named.flat_model chooses flat or named)
    state: Any
    meta: dict = dataclasses.field(default_factory=dict)  # the checkpoint's counters; empty when serving an output
    note: str = ""  # damaged checkpoints passed over on the way to this one, for the console


def from_checkpoint(config: HostConfig, checkpointer: Checkpointer) -> Restored:
    """The chosen step (config.checkpoint.restore_step), else the newest checkpoint that reads back whole and
    finite; DamagedCheckpoint naming every one tried when none does."""
    if config.checkpoint.restore_step is not None:
        return _from_step(config, checkpointer, config.checkpoint.restore_step)
    damaged = []
    for step in reversed(checkpointer.steps()):
        try:
            restored = _from_step(config, checkpointer, step)
        except DamagedCheckpoint as error:
            damaged.append(str(error))
            if config.learn:  # a resumed run saves these steps again: the damaged ones must not stand in for them
                damaged[-1] += f"; moved to {checkpointer.set_aside(step)}"
            continue
        if damaged:
            restored.note = f"resuming from checkpoint {step}, the newest good one: " + "; ".join(damaged)
        return restored
    raise DamagedCheckpoint(f"no checkpoint in {checkpointer.directory} can be used: {'; '.join(damaged)}. Start "
                            "again with a new --run-dir")


def _from_step(config: HostConfig, checkpointer: Checkpointer, step: int) -> Restored:
    saved = CheckpointMeta.from_json(checkpointer.restore_meta(step), source=f"{checkpointer.directory}/{step}")
    for name in ("network", "learner"):
        kept = getattr(saved, name)
        if kept is not None and kept != getattr(config, name):  # the saved state has that structure
            log.warning("using the checkpoint's %s config %s, not %s", name, kept, getattr(config, name))
            config = dataclasses.replace(config, **{name: kept})
    template = init_train_state(config.learner, build_network(config, saved.spec), jax.random.key(0))
    state, meta = checkpointer.restore(step, template)
    if config.serve_param_average:
        state = with_averaged_params(state, f"{checkpointer.directory}/{step}")
    log.info("restored %s at learner step %d, %d env steps", checkpointer.directory, int(state.step), meta["env_steps"])
    return Restored(config, saved.spec, state, meta)


def with_averaged_params(state: Any, source: str) -> Any:
    """`state` acting with its param average (LearnerConfig.average_from), for serving; ValueError if it has none."""
    if not state.average:
        raise ValueError(f"{source} holds no param average: its learner ran without --learner.average-from")
    count = int(state.average.count)
    if count == 0:
        raise ValueError(f"{source} has no averaged params yet: its run stopped before averaging began")
    log.info("serving the param average of %s (%d updates)", source, count)
    return state._replace(params=state.average.params)


def from_output(config: HostConfig, device: Any) -> tuple[Restored, ServedMixture]:
    """The output of the run `config.serve_output` names, and its members as a served mixture."""
    resolved, first, spec, mixture = _output_networks(config.serve_output, None, config.seed, device)
    config = dataclasses.replace(config, network=first.network_config)
    state = init_train_state(config.learner, build_network(config, spec), jax.random.key(0))
    state = state._replace(params=first.params, step=jax.numpy.asarray(resolved.step, jax.numpy.int32))
    log.info("serving the output of %s: %s", config.serve_output, resolved.describe())
    return Restored(config, spec, state), mixture


def population(config: HostConfig, device: Any, bucket) -> tuple[Restored, PopulationGames]:
    """The newest `config.population_size` snapshots of the run `config.serve_output` names, with its param average,
    as the players of evaluation games scored by every member (seedleague.host.population)."""
    run_dir = config.serve_output
    resolved = output.population(run_dir, output.recorded(run_dir).player, config.population_size,
                                 config.population_responses)
    loaded = resolved.load(config.seed)
    members = loaded.members if resolved.kind == "mixture" else [loaded]
    first = members[0]
    spec = first.model_spec
    if len(spec.action.discrete) < len(spec.action.heads) or first.network_config.lstm_size:
        raise ValueError(f"the sampled meta-game scores discrete actions of feed-forward networks; {spec.env_name}'s "
                         "networks have a continuous action head or a recurrent core, so --choose population_nash "
                         "cannot estimate it: choose among the other outputs")
    config = dataclasses.replace(config, network=first.network_config)
    state = init_train_state(config.learner, build_network(config, spec), jax.random.key(0))
    state = state._replace(params=first.params, step=jax.numpy.asarray(resolved.step, jax.numpy.int32))
    params = [jax.device_put(m.params, device) for m in members]
    samples = (MoveSamples(config.population_samples, np.random.default_rng(config.seed + 1))
               if config.population_samples else None)
    games = PopulationGames([m.key for m in resolved.members], params, jax.device_put(stack_params(params), device),
                            np.random.default_rng(config.seed), bucket,
                            mixed=len(members) - len(config.population_responses), samples=samples)
    log.info("evaluation games among %d networks of %s: %s", len(members), run_dir, resolved.describe())
    return Restored(config, spec, state), games


def exploit_target(config: HostConfig, device: Any) -> tuple[HostConfig, ExploitTarget]:
    """The output of the run `config.exploit_output` names, frozen, as a best response's opponent; `config` with the
    network that output was trained with (the best response learns from scratch in the same architecture)."""
    run_dir = config.exploit_output
    uniform = config.exploit_source == UNIFORM
    named = config.exploit_source and not uniform
    source = output.OutputConfig(config.exploit_source, output.recorded(run_dir).player) if named else None
    resolved, first, spec, mixture = _output_networks(run_dir, source, config.seed, device)
    if uniform:  # the run's own network with its policy heads zeroed: the game's uniform random policy
        if len(spec.action.discrete) < len(spec.action.heads):
            raise ValueError(f"--output {UNIFORM}: {spec.env_name}'s continuous action heads have no uniform "
                             "policy; exploit one of the run's outputs instead")
        mixture = ServedMixture([UNIFORM], [1.0], [exploit.uniform_params(first.params)],
                                np.random.default_rng(config.seed))
        log.info("training a best response to the uniform random policy of %s's game", run_dir)
    else:
        log.info("training a best response to the output of %s: %s", run_dir, resolved.describe())
    return dataclasses.replace(config, network=first.network_config), ExploitTarget(mixture, spec)


def _output_networks(run_dir: str, source: Any, seed: int, device: Any):
    """(the resolved output, its first member's loaded policy, the spec it was trained on, every member as a
    ServedMixture on `device`)."""
    resolved = output.resolve(run_dir, source)
    trained = resolved.load(seed)
    members = trained.members if resolved.kind == "mixture" else [trained]
    first = members[0]
    spec = first.model_spec
    mixture = ServedMixture([m.key for m in resolved.members], [m.weight for m in resolved.members],
                            [jax.device_put(m.params, device) for m in members], np.random.default_rng(seed),
                            resolved.seat_weights())
    return resolved, first, spec, mixture
