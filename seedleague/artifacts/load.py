"""Reading policies out of checkpoints: the learner's `checkpoints/`, a model-pool player directory
(`<run>/pool/<player>`, a league snapshot per step) or a Checkpointer directory, local or in object storage.

    policy = load_policy("runs/kuhn")                      # newest learner checkpoint: a Policy or NamedPolicy
    policy = load_policy("runs/leduc", average=True)       # its running mean of the params
    policy = load_snapshot("runs/kuhn", "main:000512")     # a league snapshot
    policies = load_policies("runs/kuhn/pool/main", [10, 20])   # many steps, the directory listed once

Only the params are read (the optimiser state is skipped), so a checkpoint of any optimiser or learner config
loads. They are checked against the checksum the checkpointer recorded for them at save, and must be finite: a
damaged checkpoint is never loaded (`seedleague.checkpoint.DamagedCheckpoint`, one line naming it and the newest
good step; without a step the newest good one is loaded, with a warning). Orbax is reached through
`seedleague.checkpoint`'s read-only functions, the one module that restores checkpoints.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Optional, Sequence

import jax
import numpy as np

from seedleague import checkpoint
from seedleague.artifacts.networks import shared_network, named_network_for
from seedleague.artifacts.policy import Policy, PolicySpec, recurrent_error
from seedleague.artifacts.named import NamedPolicy
from seedleague.checkpoint import CHECKSUM_KEY, PARTS_KEY, DamagedCheckpoint, non_finite_leaves, state_checksum
from seedleague.checkpoint_meta import CheckpointMeta
# checkpoint_dir re-exported: its callers name it as this module's.
from seedleague.artifacts.run_files import checkpoint_dir, no_checkpoint_message, snapshot_dir
from seedleague.rl.learner import ParamAverage
from seedleague.rl.networks import Network
from seedleague.rl.network_config import NetworkConfig

log = logging.getLogger(__name__)


class NoParamAverageError(ValueError):
    """`load_policy(average=True)` on a checkpoint whose learner kept no param average, or none yet."""


def _params_of(state: Any) -> Any:
    """The params sub-tree of a restored TrainState.

    Orbax 0.12 saves a NamedTuple as a dict keyed by field name, and restoring it without
    a template gives {"params": ..., "opt_state": ..., "step": ..., "rng": ...} of arrays
    (optax's tuples come back as lists, empty states as None); its metadata tree has the
    same shape. A tuple/list (first field) or an object with `.params` is accepted too.
    """
    if isinstance(state, dict) and "params" in state:
        return state["params"]
    if isinstance(state, (list, tuple)) and state:
        return state[0]  # TrainState's first field
    if hasattr(state, "params"):
        return state.params
    raise ValueError(f"checkpoint state has no params (got a {type(state).__name__})")


def _verify_part(meta: dict, part: str, value: Any, source: str) -> None:
    """DamagedCheckpoint unless `value`, field `part` of the state saved in checkpoint `source`, is finite and has
    the checksum the checkpointer recorded for it at save (a checkpoint saved before those were recorded: finite)."""
    recorded = (meta.get(PARTS_KEY) or {}).get(part)
    if recorded is not None and state_checksum(value) != recorded:
        raise DamagedCheckpoint(f"checkpoint {source} does not match the checksum recorded when it was saved: its "
                                "files changed on disk")
    bad = non_finite_leaves(value)
    if bad:
        raise DamagedCheckpoint(f"checkpoint {source} holds NaN or inf in {len(bad)} arrays of its {part}")


def _restore_params(manager: Any, step: int, templates: dict, shape_key: str) -> Any:
    """Only the params of checkpoint `step` (not its optimiser state, magnets or average: a sixth of the bytes),
    restored against the params' tree metadata. That is read once per `shape_key` (the step's network and spec,
    which fix every shape) into `templates`, not once per step: the checkpoints of a run share one. Falls back
    to restoring everything without a template where the metadata has no params."""
    if shape_key not in templates:
        try:
            metadata = checkpoint.read_state_metadata(manager, step)
            templates[shape_key] = {"params": _params_of(getattr(metadata, "tree", metadata))}  # orbax's tree metadata
        except DamagedCheckpoint:  # this step's own metadata: no template for the others
            raise
        except (ValueError, TypeError, KeyError, AttributeError):
            templates[shape_key] = None
    return _params_of(checkpoint.read_state(manager, step, templates[shape_key]))


def _restore_average(manager: Any, step: int, source: str) -> tuple[Any, Any]:
    """(params, count array) of the learner's param average in checkpoint `step` (LearnerConfig.average_from)."""
    try:
        average = checkpoint.read_state_metadata(manager, step)["average"]  # orbax's tree metadata: keyed like a dict
    except (KeyError, TypeError):
        average = None
    if not (isinstance(average, dict) and "params" in average and "count" in average):
        raise NoParamAverageError(f"{source} holds no param average: its learner ran without averaging "
                                  "(train with --learner.average-from STEP to keep one)")
    restored = checkpoint.read_state(manager, step, {"average": {"params": average["params"], "count": average["count"]}})
    return restored["average"]["params"], restored["average"]["count"]


def _check_params(policy_source: str, network: Network, params: Any) -> None:
    """The restored params must have exactly the shapes the meta's network config builds."""
    expected = jax.eval_shape(network.init, jax.random.key(0))
    shapes = lambda tree: jax.tree.map(lambda x: (tuple(x.shape), np.dtype(x.dtype).name), tree)
    if jax.tree.structure(expected) != jax.tree.structure(params) or shapes(expected) != shapes(params):
        raise ValueError(
            f"the params in {policy_source} do not match the network its meta describes: expected "
            f"{shapes(expected)}, found {shapes(params)}"
        )


def _average_start(learner: dict) -> str:
    """Where a learner's param average starts, in words: "at learner step N" or "at 75% of its anneal"."""
    if learner.get("average_from") is not None:
        return f"at learner step {learner['average_from']}"
    tail = learner.get("average_tail") or 0.0
    return f"at {1 - tail:.0%} of its anneal" if tail else "never (the learner keeps no average)"


def load_policy(path: str, step: Optional[int] = None, seed: int = 0, average: bool = False) -> Policy:
    """Load a policy from `path`: a run directory (its `checkpoints/`), a Checkpointer
    directory, or a model-pool player directory (`<run>/pool/<player>`).

    A run with a protocol v2 spec (named observations, several action heads) gives a
    `seedleague.artifacts.named.NamedPolicy` (dicts in, one action per head out).

    step: which checkpoint step (learner step) to load; None loads the newest.
    seed: seeds the policy's own sampling generator (see `Policy.act`).
    average: load the learner's running mean of its params instead of its current
        params (kept when it trained with `LearnerConfig.average_from`; in
        zero-sum self-play the less exploitable of the two). The policy's
        `meta["average"]` then says over which updates: {"from": step, "count": n}
        ("from" is None for an average over the end of a time anneal, average_tail).
    Raises FileNotFoundError for a missing directory, a directory without
    checkpoints or a step that is not there; seedleague.checkpoint.DamagedCheckpoint
    (a ValueError) when checkpoint `step` cannot be read, does not match its checksum or
    holds NaN or inf, naming the newest good step to load instead (with `step` None, that
    one is loaded, with a warning); RecurrentPolicyError for LSTM networks;
    NoParamAverageError (a ValueError) for `average` where the checkpoint has no
    average, or one that has not begun (its run has not reached `average_from` yet).
    """
    return load_policies(path, [step], seed=seed, average=average)[0]


def load_policies(path: str, steps: Sequence[Optional[int]], seed: int = 0, average: bool = False) -> list:
    """`load_policy(path, step, seed, average)` for each of `steps`, reading the directory's checkpoint
    list once: a population of hundreds of snapshots loads in linear, not quadratic, time."""
    directory = checkpoint_dir(path)
    manager = checkpoint.open_read_only(directory)
    try:
        available = sorted(manager.all_steps())
        if not available:
            raise FileNotFoundError(no_checkpoint_message(path, directory))
        templates: dict = {}  # the params' tree metadata, by network and spec (`_restore_params`)
        return [_load_step(manager, directory, available, step, seed, average, templates) for step in steps]
    finally:
        manager.close()


def _load_step(manager: Any, directory: str, steps: list[int], step: Optional[int], seed: int, average: bool,
               templates: dict):
    """One policy from an open checkpoint manager whose steps are `steps` (see load_policy); `templates` carries
    the params' tree metadata from one step to the next (`_restore_params`). A damaged checkpoint is never
    loaded: without a `step` the newest good one is, with a warning; a damaged `step` is refused, naming it."""
    if step is not None and step not in steps:
        raise FileNotFoundError(f"{directory!r} has no checkpoint at step {step}; it has steps {steps}")
    chosen = steps[-1] if step is None else step
    try:
        return _load_verified(manager, directory, chosen, seed, average, templates)
    except DamagedCheckpoint as error:
        damaged = str(error)
    for older in [s for s in reversed(steps) if s < chosen]:
        try:
            policy = _load_verified(manager, directory, older, seed, average, templates)
        except (DamagedCheckpoint, NoParamAverageError):
            continue
        if step is None:
            log.warning("%s; loaded checkpoint %d, the newest good one, instead", damaged, older)
            return policy
        raise DamagedCheckpoint(f"{damaged}; it was not loaded. The newest good checkpoint there is step {older}: "
                                f"load_policy({directory!r}, step={older})")
    raise DamagedCheckpoint(f"{damaged}; it was not loaded, and no older checkpoint in {directory} can be")


def _load_verified(manager: Any, directory: str, step: int, seed: int, average: bool, templates: dict):
    """Checkpoint `step`'s policy, its params (or param average) checked against the checksum recorded at save;
    DamagedCheckpoint if they cannot be read, do not match it or hold NaN or inf."""
    raw = checkpoint.read_meta(manager, step)
    source = f"{directory}/{step}"
    if not isinstance(raw, dict):
        raise DamagedCheckpoint(f"checkpoint {source} has no readable meta (found {type(raw).__name__})")
    recorded = {k: raw[k] for k in (PARTS_KEY, CHECKSUM_KEY) if k in raw}
    meta = {k: v for k, v in raw.items() if k not in recorded}  # the run's meta, not the checkpointer's checksums
    parsed = CheckpointMeta.from_json(meta, source, learner=False)
    spec = parsed.spec if parsed.record_protocol == 2 else PolicySpec.from_json(meta["spec"])
    config = parsed.network or NetworkConfig()  # a meta without one is checked against the params' shapes
    if config.lstm_size:  # refused before reading any params
        raise recurrent_error(source, config.lstm_size)
    if average:
        params, count = _restore_average(manager, step, source)
        _verify_part(recorded, "average", ParamAverage(params, count), source)
        count = int(count)
        learner = meta.get("learner") or {}
        if count == 0:
            raise NoParamAverageError(f"{source} has no averaged params yet: averaging starts "
                                      f"{_average_start(learner)}")
        meta["average"] = {"from": learner.get("average_from"), "count": count}
        source = f"{source} (param average)"
    else:
        params = _restore_params(manager, step, templates, json.dumps([meta.get("network"), meta["spec"]], sort_keys=True))
        _verify_part(recorded, "params", params, source)
    if not isinstance(spec, PolicySpec):  # a protocol v2 run: named observations, one action per head
        _check_params(source, named_network_for(config, spec), params)
        return NamedPolicy(config, params, spec, step=step, meta=meta, source=source, seed=seed)
    network = shared_network(config, spec.observation_shape, spec.observation_dtype, spec.num_actions)
    _check_params(source, network, params)
    return Policy(config, params, spec, step=step, meta=meta, source=source, seed=seed)


def load_snapshot(run_dir: str, key: str, seed: int = 0) -> Policy:
    """Load league snapshot `key` ("player:step", e.g. "main:000512") from `<run_dir>/pool/<player>`."""
    player_dir, step = snapshot_dir(run_dir, key)  # the run's pool: <run_dir>/pool or its recorded URL
    return load_policy(player_dir, step, seed=seed)


def checkpoint_steps(directory: str) -> list[int]:
    """The complete checkpoints' steps in a Checkpointer directory, oldest first."""
    manager = checkpoint.open_read_only(os.path.abspath(directory))
    try:
        return sorted(manager.all_steps())
    finally:
        manager.close()


def param_average_count(path: str, step: int) -> int:
    """Updates averaged into the param average of checkpoint `step` under `path` (a run or checkpoint
    directory); 0 when its learner keeps none or has not begun averaging."""
    manager = checkpoint.open_read_only(checkpoint_dir(path))
    try:
        return int(_restore_average(manager, step, path)[1])
    except NoParamAverageError:
        return 0
    finally:
        manager.close()
