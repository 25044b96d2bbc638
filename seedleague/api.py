"""The Python API for using a trained policy outside seedleague: load it, query it.

This file owns reading params out of any seedleague checkpoint (the learner's
`checkpoints/` or a model-pool player directory) and the `Policy` object that
answers batched, jitted queries:

    from seedleague.api import load_policy, load_snapshot

    policy = load_policy("runs/kuhn")                      # newest learner checkpoint
    policy = load_policy("runs/leduc", average=True)       # its running mean of the params
    policy = load_snapshot("runs/kuhn", "main:000512")     # a league snapshot
    average = load_average_policy("runs/leduc")            # a PolicyMixture: draw() one member per game
    trained = load_trained("runs/kuhn")                    # the run's --output: a Policy or a PolicyMixture
    probs = policy.action_probabilities(observation, legal_mask)   # [B, A]; illegal exactly 0
    action = policy.act(observation, legal_mask, greedy=True)      # [B] int

Only the params are read (the optimiser state is skipped), so a checkpoint of
any optimiser or learner config loads. They are checked against the checksum the
checkpointer recorded for them at save, and must be finite: a damaged checkpoint is
never loaded (`seedleague.checkpoint.DamagedCheckpoint`, one line naming it and the
newest good step; without a step the newest good one is loaded, with a warning). Observations are what the env worker
sent to the host; for OpenSpiel games that is `seedleague.games.openspiel.encode`.
See docs/api.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import warnings
from typing import Any, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from seedleague import object_store
from seedleague.buckets import power_of_two
from seedleague.checkpoint_meta import CheckpointMeta
from seedleague.rl import xla_cpu
from seedleague.rl.networks import Network, NetworkConfig, make_network

Rng = Union[np.random.Generator, int, None]

log = logging.getLogger(__name__)


class RecurrentPolicyError(NotImplementedError):
    """The checkpoint's network has an LSTM core; this API answers feed-forward policies only."""


class NoParamAverageError(ValueError):
    """`load_policy(average=True)` on a checkpoint whose learner kept no param average, or none yet."""


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """What a policy was trained on: the env worker's declared spaces."""

    env_name: str  # e.g. "openspiel:kuhn_poker" or "CartPole-v1"
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    num_actions: int

    def __post_init__(self):
        object.__setattr__(self, "observation_shape", tuple(int(d) for d in self.observation_shape))
        object.__setattr__(self, "observation_dtype", np.dtype(self.observation_dtype))
        object.__setattr__(self, "num_actions", int(self.num_actions))
        if self.num_actions < 1:
            raise ValueError(f"PolicySpec.num_actions must be >= 1, got {self.num_actions}")

    @classmethod
    def from_json(cls, data: dict) -> "PolicySpec":
        """From a checkpoint meta's `spec` entry."""
        return cls(str(data["env_name"]), data["observation_shape"], data["observation_dtype"], data["num_actions"])


def _forward_rows(network: Network, params: Any, observation: jax.Array, legal_mask: jax.Array):
    """Masked logits (illegal = -inf), legal-only probabilities and values over [B] rows."""
    first = jnp.ones((observation.shape[0], 1), bool)
    logits, value, _ = network.apply(params, observation[:, None], first, ())
    logits_t = logits[:, 0]
    masked_t = jnp.where(legal_mask, logits_t, -jnp.inf)
    probs_t = jax.nn.softmax(masked_t, axis=-1)  # exp(-inf) = 0: illegal actions get exactly 0
    return logits_t, masked_t, probs_t, value[:, 0]


_forward = xla_cpu.jit_choosing_fusions(_forward_rows, static_argnames=("network",))


def _sample(probs: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """One action per row of `probs` [..., A] by inverse CDF; actions of probability 0 are never chosen."""
    cdf = np.cumsum(probs, axis=-1)
    u = generator.random(cdf.shape[:-1])[..., None] * cdf[..., -1:]
    above = cdf > u  # illegal actions add 0 to the cdf, so the first index above u is legal
    last_possible = probs.shape[-1] - 1 - np.argmax(probs[..., ::-1] > 0, axis=-1)  # if rounding put u at the top
    return np.where(above.any(axis=-1), np.argmax(above, axis=-1), last_possible)


def recurrent_error(source: str, lstm_size: int) -> RecurrentPolicyError:
    return RecurrentPolicyError(
        f"{source or 'this policy'} has an LSTM core (lstm_size={lstm_size}); recurrent policies need a "
        "state-carrying API (initial_state / state passing), which seedleague.api does not offer yet: "
        "evaluate it through `seedleague serve` with your env worker instead"
    )


@functools.lru_cache(maxsize=32)
def _network(config: NetworkConfig, observation_shape: tuple[int, ...], observation_dtype: np.dtype,
             num_actions: int) -> Network:
    """One Network per architecture, so policies of the same shape (a league's snapshots) share compiles."""
    return make_network(config, observation_shape, observation_dtype, num_actions)


class Policy:
    """A feed-forward policy with its params: batched, jitted queries on numpy inputs.

    Every query takes `observation` shaped `[B, *spec.observation_shape]`, or one
    unbatched observation shaped `spec.observation_shape` (the answer then has no
    batch axis), and an optional `legal_mask` `[B, A]` (or `[A]`) of bools, True
    where an action is legal; without a mask every action is legal.
    """

    def __init__(self, network_config: NetworkConfig, params: Any, spec: PolicySpec, step: int = 0,
                 meta: Optional[dict] = None, source: str = "", seed: int = 0):
        if network_config.lstm_size:
            raise recurrent_error(source, network_config.lstm_size)
        self.spec = spec
        self.step = int(step)  # learner step (policy version) of the params
        self.meta = dict(meta or {})  # the checkpoint's JSON sidecar: run counters, network, ...
        self.source = source  # where it was loaded from, for messages and reports
        self.network_config = network_config
        self.network = _network(network_config, spec.observation_shape, spec.observation_dtype, spec.num_actions)
        self.params = jax.tree.map(jnp.asarray, params)
        self._rng = np.random.default_rng(seed)

    def __repr__(self) -> str:
        return f"Policy({self.spec.env_name!r}, step={self.step}, source={self.source!r})"

    # -- queries ------------------------------------------------------------------------------

    def logits(self, observation: np.ndarray, legal_mask: Optional[np.ndarray] = None) -> np.ndarray:
        """[B, A] float32 logits; with a mask, illegal actions are -inf."""
        raw, masked, _, _ = self._run(observation, legal_mask)
        return raw if legal_mask is None else masked

    def action_probabilities(self, observation: np.ndarray, legal_mask: Optional[np.ndarray] = None) -> np.ndarray:
        """[B, A] float32: softmax over the legal actions only; illegal actions are exactly 0."""
        return self._run(observation, legal_mask)[2]

    def value(self, observation: np.ndarray) -> np.ndarray:
        """[B] float32 value estimates (a float for one unbatched observation)."""
        value = self._run(observation, None)[3]
        return float(value) if np.ndim(value) == 0 else value

    def act(self, observation: np.ndarray, legal_mask: Optional[np.ndarray] = None, greedy: bool = False,
            rng: Rng = None) -> np.ndarray:
        """[B] int32 legal actions (an int for one unbatched observation).

        greedy: the most probable legal action (lowest index on ties); else sampled.
        rng: a numpy Generator or an int seed for the sampling; None uses the policy's
            own generator (seeded at load, so runs are reproducible).
        """
        probs = self._run(observation, legal_mask)[2]
        if greedy:
            action = np.argmax(probs, axis=-1)
        else:
            generator = self._rng if rng is None else np.random.default_rng(rng)
            action = _sample(probs, generator)
        action = action.astype(np.int32)
        return int(action) if action.ndim == 0 else action

    # -- input checks -------------------------------------------------------------------------

    def _run(self, observation: Any, legal_mask: Any):
        observation, single = self._check_observation(observation)
        batch = observation.shape[0]
        mask = self._check_mask(legal_mask, batch, single)
        size = power_of_two(batch)
        if size != batch:  # padded rows: zeros, every action legal (no NaN), dropped below
            pad = size - batch
            observation = np.concatenate([observation, np.zeros((pad,) + observation.shape[1:], observation.dtype)])
            mask = np.concatenate([mask, np.ones((pad, mask.shape[1]), bool)])
        outputs = _forward(self.network, self.params, observation, mask)
        outputs = [np.asarray(x)[:batch] for x in outputs]
        return [x[0] for x in outputs] if single else outputs

    def _check_observation(self, observation: Any) -> tuple[np.ndarray, bool]:
        shape, dtype = self.spec.observation_shape, self.spec.observation_dtype
        observation = np.asarray(observation)
        if observation.shape == shape:
            single, observation = True, observation[None]
        elif observation.ndim == len(shape) + 1 and observation.shape[1:] == shape:
            single = False
        else:
            raise ValueError(
                f"observation must be shaped {shape} (one) or [B, *{shape}] (a batch) for {self.spec.env_name!r}, "
                f"got {observation.shape}"
            )
        if observation.shape[0] == 0:
            raise ValueError("observation batch is empty: pass at least one row")
        if np.issubdtype(observation.dtype, np.inexact) and not np.isfinite(observation).all():
            rows = np.flatnonzero(~np.isfinite(observation.reshape(len(observation), -1)).all(axis=1))
            raise ValueError(f"observation has NaN or infinite values in row(s) {rows[:10].tolist()}")
        if observation.dtype != dtype:
            if not np.can_cast(observation.dtype, dtype, casting="same_kind"):
                raise ValueError(
                    f"observation dtype {observation.dtype} does not fit the policy's {dtype} "
                    f"(for {self.spec.env_name!r}); convert it the way the env worker does"
                )
            observation = observation.astype(dtype)
        return observation, single

    def _check_mask(self, legal_mask: Any, batch: int, single: bool) -> np.ndarray:
        num_actions = self.spec.num_actions
        if legal_mask is None:
            return np.ones((batch, num_actions), bool)
        mask = np.asarray(legal_mask)
        expected = (num_actions,) if single else (batch, num_actions)
        if mask.shape != expected:
            raise ValueError(f"legal_mask must be shaped {expected} to match the observation, got {mask.shape}")
        if mask.dtype != bool:
            if not np.isin(mask, (0, 1)).all():
                raise ValueError(f"legal_mask must be bools (or 0/1), got dtype {mask.dtype} with other values")
            mask = mask.astype(bool)
        mask = mask.reshape(batch, num_actions)
        empty = np.flatnonzero(~mask.any(axis=-1))
        if empty.size:
            raise ValueError(f"legal_mask has no legal action in row(s) {empty[:10].tolist()}: every row needs one")
        return mask


# -- loading ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_orbax():
    """Silence orbax's notices that are expected here: a warning each time a directory is
    opened read-only, and one that sharding is read from the file (params come back as numpy)."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sharding info not provided when restoring")
            yield
    finally:
        logger.setLevel(level)


def _open_manager(directory: str):
    import orbax.checkpoint as ocp

    handlers = {"state": ocp.PyTreeCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    with _quiet_orbax():
        options = ocp.CheckpointManagerOptions(read_only=True, create=False)
        return ocp.CheckpointManager(directory, options=options, item_handlers=handlers)


def _checkpoint_dir(path: str) -> str:
    """`<path>/checkpoints` for a run directory, else `path` itself (a Checkpointer or pool player directory)."""
    if object_store.is_url(path):  # a pool player or checkpoints in object storage: read from this machine's mirror
        return object_store.mirror(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such directory: {path!r}")
    if not os.path.isdir(path):
        raise NotADirectoryError(f"{path!r} is a file; pass a run directory or a checkpoint directory")
    candidate = os.path.join(path, "checkpoints")
    return os.path.abspath(candidate if os.path.isdir(candidate) else path)


def _no_checkpoint_message(path: str, directory: str) -> str:
    message = f"no checkpoint in {directory!r}"
    pool = os.path.join(path, "pool")
    if os.path.isdir(pool):
        players = sorted(os.listdir(pool))
        message += (f"; the run's model pool has players {players}: use load_snapshot({path!r}, 'player:step') "
                    f"or load_policy({os.path.join(pool, players[0]) if players else pool!r})")
    return message


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


def _restore_state(manager: Any, step: int, subtrees: Optional[dict]) -> Any:
    """The state of checkpoint `step`, only `subtrees` (a dict of the state's metadata subtrees,
    as numpy arrays) when given, else everything without a template."""
    import orbax.checkpoint as ocp

    if subtrees is not None:
        abstract = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), subtrees)
        restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), abstract)
        args = ocp.args.PyTreeRestore(item=abstract, restore_args=restore_args, partial_restore=True)
    else:
        args = ocp.args.PyTreeRestore()
    return _read(manager, step, ocp.args.Composite(state=args))["state"]


def _read(manager: Any, step: int, args: Any) -> Any:
    """Orbax's restore of checkpoint `step` (which exists); any failure to read its files (truncated, junk, a
    missing file) is a one-line DamagedCheckpoint naming it."""
    from seedleague.checkpoint import read_failure  # imports orbax: only when a checkpoint is read

    try:
        with _quiet_orbax():
            return manager.restore(step, args=args)
    except Exception as error:  # orbax, tensorstore and json raise many kinds for damaged bytes
        raise read_failure(str(manager.directory), step, error) from None


def _state_metadata(manager: Any, step: int) -> Any:
    """Orbax's tree metadata of checkpoint `step`'s state; DamagedCheckpoint when its file cannot be read."""
    from seedleague.checkpoint import read_failure  # imports orbax: only when a checkpoint is read

    try:
        with _quiet_orbax():
            return manager.item_metadata(step)["state"]
    except Exception as error:  # truncated or junk JSON, a missing file
        raise read_failure(str(manager.directory), step, error) from None


def _verify_part(meta: dict, part: str, value: Any, source: str) -> None:
    """DamagedCheckpoint unless `value`, field `part` of the state saved in checkpoint `source`, is finite and has
    the checksum the checkpointer recorded for it at save (a checkpoint saved before those were recorded: finite)."""
    from seedleague.checkpoint import PARTS_KEY, DamagedCheckpoint, non_finite_leaves, state_checksum

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
    from seedleague.checkpoint import DamagedCheckpoint  # imports orbax: only when a checkpoint is read

    if shape_key not in templates:
        try:
            metadata = _state_metadata(manager, step)
            templates[shape_key] = {"params": _params_of(getattr(metadata, "tree", metadata))}  # orbax's tree metadata
        except DamagedCheckpoint:  # this step's own metadata: no template for the others
            raise
        except (ValueError, TypeError, KeyError, AttributeError):
            templates[shape_key] = None
    return _params_of(_restore_state(manager, step, templates[shape_key]))


def _restore_average(manager: Any, step: int, source: str) -> tuple[Any, Any]:
    """(params, count array) of the learner's param average in checkpoint `step` (LearnerConfig.average_from)."""
    try:
        average = _state_metadata(manager, step)["average"]  # orbax's tree metadata: keyed like a dict
    except (KeyError, TypeError):
        average = None
    if not (isinstance(average, dict) and "params" in average and "count" in average):
        raise NoParamAverageError(f"{source} holds no param average: its learner ran without averaging "
                                  "(train with --learner.average-from STEP to keep one)")
    restored = _restore_state(manager, step, {"average": {"params": average["params"], "count": average["count"]}})
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
    `seedleague.structured_policy.StructuredPolicy` (dicts in, one action per head out).

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
    directory = _checkpoint_dir(path)
    manager = _open_manager(directory)
    try:
        available = sorted(manager.all_steps())
        if not available:
            raise FileNotFoundError(_no_checkpoint_message(path, directory))
        templates: dict = {}  # the params' tree metadata, by network and spec (`_restore_params`)
        return [_load_step(manager, directory, available, step, seed, average, templates) for step in steps]
    finally:
        manager.close()


def _load_step(manager: Any, directory: str, steps: list[int], step: Optional[int], seed: int, average: bool,
               templates: dict):
    """One policy from an open checkpoint manager whose steps are `steps` (see load_policy); `templates` carries
    the params' tree metadata from one step to the next (`_restore_params`). A damaged checkpoint is never
    loaded: without a `step` the newest good one is, with a warning; a damaged `step` is refused, naming it."""
    from seedleague.checkpoint import DamagedCheckpoint  # imports orbax: only when a checkpoint is read

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
    from seedleague.checkpoint import PARTS_KEY, CHECKSUM_KEY
    from seedleague.rl.learner import ParamAverage

    raw = _read(manager, step, _meta_args())["meta"]
    source = f"{directory}/{step}"
    if not isinstance(raw, dict):
        from seedleague.checkpoint import DamagedCheckpoint

        raise DamagedCheckpoint(f"checkpoint {source} has no readable meta (found {type(raw).__name__})")
    recorded = {k: raw[k] for k in (PARTS_KEY, CHECKSUM_KEY) if k in raw}
    meta = {k: v for k, v in raw.items() if k not in recorded}  # the run's meta, not the checkpointer's checksums
    parsed = CheckpointMeta.from_json(meta, source, learner=False)
    spec = parsed.spec if meta["spec"].get("protocol") == 2 else PolicySpec.from_json(meta["spec"])
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
        from seedleague.structured_policy import StructuredPolicy, structured_network_for

        _check_params(source, structured_network_for(config, spec), params)
        return StructuredPolicy(config, params, spec, step=step, meta=meta, source=source, seed=seed)
    network = _network(config, spec.observation_shape, spec.observation_dtype, spec.num_actions)
    _check_params(source, network, params)
    return Policy(config, params, spec, step=step, meta=meta, source=source, seed=seed)


def _meta_args():
    import orbax.checkpoint as ocp

    return ocp.args.Composite(meta=ocp.args.JsonRestore())


def load_snapshot(run_dir: str, key: str, seed: int = 0) -> Policy:
    """Load league snapshot `key` ("player:step", e.g. "main:000512") from `<run_dir>/pool/<player>`."""
    from seedleague.league.types import parse_key

    player, step = parse_key(key)
    if step is None:
        raise ValueError(
            f"{key!r} names a live player, not a snapshot: pass 'player:step' (e.g. '{key}:000512'), "
            f"load_policy({run_dir!r}) for the learner's newest checkpoint, or "
            f"load_policy({os.path.join(run_dir, 'pool', key)!r}) for {key}'s newest snapshot"
        )
    from seedleague.league.model_pool import player_dir_of  # the run's pool: <run_dir>/pool or its recorded URL

    player_dir = player_dir_of(run_dir, player)
    if not object_store.is_url(player_dir) and not os.path.isdir(player_dir):
        pool = os.path.join(run_dir, "pool")
        known = sorted(os.listdir(pool)) if os.path.isdir(pool) else []
        raise FileNotFoundError(f"snapshot {key!r}: no player directory {player_dir!r} (the pool has players {known})")
    return load_policy(player_dir, step, seed=seed)


def mixture_weights(count: int, weights: Any) -> np.ndarray:
    """`weights` for a mixture of `count` policies, normalised to sum to 1; ValueError names a bad one."""
    w = np.asarray(weights, np.float64)
    if count == 0 or w.shape != (count,):
        raise ValueError(f"a mixture needs one weight per policy and at least one policy; got {count} policies, "
                         f"{len(w) if w.ndim == 1 else w.shape} weights")
    if not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"mixture weights must be finite, >= 0 and not all 0, got {list(weights)}")
    return w / w.sum()


def seat_mixture_weights(count: int, seat_weights: Any) -> np.ndarray:
    """[seats, count]: one row of `mixture_weights` per seat; ValueError names a bad row."""
    rows = np.asarray(seat_weights, np.float64)
    if rows.ndim != 2 or rows.shape[0] < 1:
        raise ValueError(f"seat weights need one row of {count} weights per seat, got shape {rows.shape}")
    return np.stack([mixture_weights(count, row) for row in rows])


class PolicyMixture:
    """A strategy over whole games: play `members[k]` for an entire episode with probability
    `weights[k]` (normalised to sum to 1). This is how an average policy of self-play, or a league's
    Nash mixture, is played: `draw()` a member at every episode start and act with it until the
    episode ends. Averaging the members' action probabilities state by state instead would be
    another strategy (seedleague.eval.openspiel_eval.mixture_policy builds the equivalent one).

    With `seat_weights` ([seats, K]) each seat has its own mix, as the least exploitable mixture of
    a run's networks does (seedleague.eval.least_exploitable): `draw(seat=s)` draws by row s, and
    `weights` (their mean) is the mix for a caller that does not know its seat."""

    def __init__(self, members: list[Policy], weights: list[float], seed: int = 0, seat_weights: Any = None):
        self.weights = mixture_weights(len(members), weights)
        self.seat_weights = None if seat_weights is None else seat_mixture_weights(len(members), seat_weights)
        if len({m.spec for m in members}) > 1:
            raise ValueError(f"a mixture's members must share one env spec, got {sorted({str(m.spec) for m in members})}")
        self.members = list(members)
        self.spec = members[0].spec
        self._rng = np.random.default_rng(seed)

    def __repr__(self) -> str:
        return f"PolicyMixture({len(self.members)} members of {self.spec.env_name!r})"

    def draw(self, rng: Rng = None, seat: Optional[int] = None) -> Policy:
        """The member to play the next whole episode with (rng: a Generator or int seed; None: the
        mixture's own generator), in `seat` where the mixture has one mix per seat."""
        generator = self._rng if rng is None else np.random.default_rng(rng)
        weights = self.weights
        if seat is not None and self.seat_weights is not None:
            if not 0 <= seat < len(self.seat_weights):
                raise ValueError(f"this mixture has weights for seats 0-{len(self.seat_weights) - 1}, got seat {seat}")
            weights = self.seat_weights[seat]
        return self.members[generator.choice(len(self.members), p=weights)]


def load_average_policy(run_dir: str, fraction: float = 1 / 3, player: str = "main",
                        param_average: bool = True, seed: int = 0) -> PolicyMixture:
    """The run's average policy, as the end of `seedleague train` reports it.

    The uniform mixture of the newest `fraction` of `player`'s league snapshots ("average
    policy"); with `param_average`, when the newest learner checkpoint of `run_dir` keeps the
    learner's param average, that network joins with half the weight ("average + param average":
    Leduc's least exploitable output, see benchmarks/README.md). Raises ValueError for a fraction
    outside (0, 1], FileNotFoundError when the player has no snapshots.
    """
    from seedleague import output

    return output.average_policy(run_dir, fraction, player, param_average).load(seed)


def load_trained(run_dir: str, seed: int = 0) -> Union[Policy, PolicyMixture]:
    """The run's output: what its `--output` source (recorded in `<run_dir>/output.json` when the
    run started; `final` for older runs) names, resolved from what is on disk now, so a run that
    was stopped or killed mid-way gives its newest checkpoint and the snapshots it has written.

        final           Policy: the newest checkpoint's params
        param_average   Policy: that checkpoint's param average (the final params, with a logged
                        note, where it keeps none)
        average_policy  PolicyMixture: as load_average_policy(run_dir)
        league_nash     PolicyMixture: the Nash mixture over the player's snapshots, solved from
                        the league's payoff table

    A mixture is played one member per whole episode (`draw()`). Raises FileNotFoundError when
    the run has no output yet (no checkpoint, or no snapshots for a mixture), saying why.
    """
    from seedleague import output

    return output.resolve(run_dir).load(seed)


def checkpoint_steps(directory: str) -> list[int]:
    """The complete checkpoints' steps in a Checkpointer directory, oldest first."""
    manager = _open_manager(os.path.abspath(directory))
    try:
        return sorted(manager.all_steps())
    finally:
        manager.close()


def param_average_count(path: str, step: int) -> int:
    """Updates averaged into the param average of checkpoint `step` under `path` (a run or checkpoint
    directory); 0 when its learner keeps none or has not begun averaging."""
    manager = _open_manager(_checkpoint_dir(path))
    try:
        return int(_restore_average(manager, step, path)[1])
    except NoParamAverageError:
        return 0
    finally:
        manager.close()
