"""Where a host's first train state comes from when it does not start fresh.

- `from_checkpoint`: the latest (or a chosen) checkpoint of the run directory, to resume
  training or to serve it (optionally its param average), with the spec, network and learner
  configs it was saved with.
- `from_output`: a finished run's output (seedleague.output): its first member's params, and
  every member as a `ServedMixture` that draws one per episode.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import numpy as np

from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_meta import CheckpointMeta
from seedleague.host.config import HostConfig
from seedleague.host.mixture import ServedMixture
from seedleague.host.pipeline import build_network
from seedleague.protocol.specs import EnvSpec
from seedleague.protocol.specs_v2 import StructuredEnvSpec
from seedleague.rl.learner import init_train_state

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Restored:
    """A train state to build the pipeline from, the config it needs, and the run's counters so far."""

    config: HostConfig  # with the network (and learner) config the state was saved with
    spec: "EnvSpec | StructuredEnvSpec"
    state: Any
    meta: dict = dataclasses.field(default_factory=dict)  # the checkpoint's counters; empty when serving an output


def from_checkpoint(config: HostConfig, checkpointer: Checkpointer) -> Restored:
    step = config.checkpoint.restore_step
    saved = CheckpointMeta.from_json(checkpointer.restore_meta(step), source=checkpointer.directory)
    for name in ("network", "learner"):
        kept = getattr(saved, name)
        if kept is not None and kept != getattr(config, name):  # the saved state has that structure
            log.warning("using the checkpoint's %s config %s, not %s", name, kept, getattr(config, name))
            config = dataclasses.replace(config, **{name: kept})
    template = init_train_state(config.learner, build_network(config, saved.spec), jax.random.key(0))
    step = checkpointer.latest_step() if step is None else step
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
    from seedleague import output

    resolved = output.resolve(config.serve_output)
    trained = resolved.load(config.seed)
    members = trained.members if resolved.kind == "mixture" else [trained]
    first = members[0]
    config = dataclasses.replace(config, network=first.network_config)
    if isinstance(first.spec, StructuredEnvSpec):  # a protocol v2 run: its named tensors and heads, as recorded
        spec = first.spec
    else:
        spec = EnvSpec(first.spec.env_name, first.spec.observation_shape, first.spec.observation_dtype,
                       first.spec.num_actions, 1)
    state = init_train_state(config.learner, build_network(config, spec), jax.random.key(0))
    state = state._replace(params=first.params, step=jax.numpy.asarray(resolved.step, jax.numpy.int32))
    mixture = ServedMixture([m.key for m in resolved.members], [m.weight for m in resolved.members],
                            [jax.device_put(m.params, device) for m in members], np.random.default_rng(config.seed),
                            resolved.seat_weights())
    log.info("serving the output of %s: %s", config.serve_output, resolved.describe())
    return Restored(config, spec, state), mixture
