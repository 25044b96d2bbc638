"""One feed-forward policy as an ONNX graph, and the JSON sidecar that says how to feed it.

The graph is the policy network of `seedleague.artifacts.policy.Policy` traced by jax2onnx with its params
baked in as constants, for any batch size B:

    inputs   observation    [B, *observation_shape]  the spec's dtype, float64 as float32 (uint8 scaled inside)
             legal_mask     [B, A] bool              True where an action is legal; all True for none
    outputs  logits         [B, A] float32           the policy head, no mask applied
             masked_logits  [B, A] float32           logits, illegal actions -inf
             probabilities  [B, A] float32           softmax over the legal actions; illegal exactly 0
             value          [B]    float32           the value head

These are exactly `Policy.logits(obs)`, `Policy.logits(obs, mask)`, `Policy.action_probabilities(obs,
mask)` and `Policy.value(obs)`. Usage:

    model = policy_model(policy)          # onnx.ModelProto
    sidecar = describe(policy, model)     # dict, written next to the .onnx as <file>.json
    write(policy, "policy.onnx")          # both files (policy.onnx.json), atomically; returns the sidecar

What every exported graph shares (opset, batch dimension, the quiet tracer, the sidecar's tensor list,
atomic writes) is defined here once; seedleague.export.onnx_named builds protocol v2 policies' graphs
with it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from seedleague import storage
from seedleague.artifacts.policy import Policy
from seedleague.rl.networks import _resolve_torso

INPUTS = ("observation", "legal_mask")
OUTPUTS = ("logits", "masked_logits", "probabilities", "value")
OPSET = 17  # onnxruntime 1.14+ and onnxruntime-node/-web run it
BATCH = "B"  # the symbolic batch dimension of every input and output
# The sidecar entries every member of a mixture shares (seedleague.export.cli writes them once in its index).
MIXTURE_KEYS = ("format", "opset", "inputs", "outputs", "output_meaning", "observation", "num_actions", "legal_mask",
                "recurrent")

LEGAL_MASK = (
    "legal_mask is an input: [B, A] bool, True where the action is legal (pass all True when the game has no mask). "
    "masked_logits sets illegal actions to -inf and probabilities is the softmax over the legal actions only, so an "
    "illegal action has probability exactly 0; logits is the unmasked policy head. Every row needs at least one "
    "legal action (a row of all False gives NaN probabilities)."
)
_LAYOUTS = {
    "mlp": "any layout: the MLP torso flattens each observation in C (row-major) order",
    "conv": "[H, W, C] frames, channels last (the Nature CNN torso)",
    "board": "[C, H, W] board planes, channels first (the board torso)",
}


def _forward(policy: Policy, observation: jax.Array, legal_mask: jax.Array):
    """What the graph computes: seedleague.api's masked forward pass over one time step."""
    first = jnp.ones((observation.shape[0], 1), bool)
    logits, value, _ = policy.network.apply(policy.params, observation[:, None], first, ())
    logits_t = logits[:, 0]
    masked_t = jnp.where(legal_mask, logits_t, -jnp.inf)
    return logits_t, masked_t, jax.nn.softmax(masked_t, axis=-1), value[:, 0]


@contextlib.contextmanager
def quiet_exporter():
    """jax2onnx's IR serialiser logs a warning per untyped shape constant it skips; they are expected."""
    logger = logging.getLogger("onnx_ir")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def policy_model(policy: Policy) -> Any:
    """The ONNX ModelProto of `policy` (inputs and outputs as in the module docstring), checked by onnx."""
    import onnx  # optional-heavy: onnx and jax2onnx load only when a policy is exported
    from jax2onnx import to_onnx  # optional-heavy: as above

    spec = policy.spec
    batch = jax.export.symbolic_shape(BATCH)[0]
    dtype = jax.dtypes.canonicalize_dtype(spec.observation_dtype)  # float64 -> float32 unless jax_enable_x64
    inputs = [jax.ShapeDtypeStruct((batch, *spec.observation_shape), dtype),
              jax.ShapeDtypeStruct((batch, spec.num_actions), np.bool_)]
    with quiet_exporter():
        model = to_onnx(lambda obs, mask: _forward(policy, obs, mask), inputs, model_name="seedleague_policy",
                        opset=OPSET, input_names=list(INPUTS), output_names=list(OUTPUTS))
    model.producer_name = "seedleague"
    model.doc_string = f"seedleague policy for {spec.env_name} (learner step {policy.step}); see the .json sidecar"
    onnx.checker.check_model(model)
    return model


def graph_tensors(values) -> list[dict]:
    """[{name, dtype, shape}] of graph inputs or outputs; symbolic dimensions by name ("B")."""
    import onnx  # optional-heavy: onnx loads only when a graph is written or read

    out = []
    for value in values:
        tensor = value.type.tensor_type
        shape = [d.dim_param or d.dim_value for d in tensor.shape.dim]
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name
        out.append(dict(name=value.name, dtype=dtype, shape=shape))
    return out


def input_scaling(dtype: np.dtype, graph_dtype: str, squash: bool) -> str:
    """The sidecar's words on what the graph does to an observation input before its first layer."""
    if dtype == np.uint8:
        scaling = "uint8 values are divided by 255 inside the graph: feed the raw bytes"
    elif squash:
        scaling = ("cast to float32, then values beyond [-1, 1] squashed to sign(x) (1 + ln|x|) inside the graph: "
                   "feed the values as the env worker sends them")
    else:
        scaling = "cast to float32 inside the graph, with no normalisation: feed the values as the env worker sends them"
    if graph_dtype != np.dtype(dtype).name:
        scaling += f" (the env sends {np.dtype(dtype).name}; cast it to the graph's {graph_dtype} first)"
    return scaling


def _observation(policy: Policy, graph_dtype: str) -> dict:
    """How to build the observation input: what the env worker sends the host for one agent.
    `graph_dtype` is the graph's input dtype: JAX computes in 32 bits, so a float64 env's input is float32."""
    spec, torso = policy.spec, _resolve_torso(policy.network_config.torso, policy.spec.observation_shape)
    dtype = np.dtype(spec.observation_dtype)
    scaling = input_scaling(dtype, graph_dtype, policy.network_config.squash_inputs)
    encoding = ("seedleague.games.openspiel.encode(state, player): the acting player's information-state tensor (or the "
                "observation tensor plus one constant plane per player marking whose view it is); actions are "
                "OpenSpiel's distinct action ids" if spec.env_name.startswith("openspiel:") else
                "the observation the env worker sends the host for this agent (seedleague.protocol.specs.EnvSpec), "
                "one row per agent (env and seat) to act; actions are the worker's action indices")
    return dict(env_name=spec.env_name, shape=list(spec.observation_shape), dtype=graph_dtype, env_dtype=dtype.name,
                layout=_LAYOUTS[torso], scaling=scaling, encoding=encoding)


def describe(policy: Policy, model: Any) -> dict:
    """The sidecar of `policy`'s exported `model`: inputs, outputs, observation encoding, legal mask, origin."""
    torso = _resolve_torso(policy.network_config.torso, policy.spec.observation_shape)
    network = dict(policy.meta.get("network") or {}, torso_resolved=torso)
    inputs = graph_tensors(model.graph.input)
    return dict(
        format="onnx", opset=OPSET, producer="seedleague", inputs=inputs, outputs=graph_tensors(model.graph.output),
        output_meaning=dict(logits="policy head, unmasked", masked_logits="logits with illegal actions -inf",
                            probabilities="softmax over the legal actions (seedleague.api action_probabilities)",
                            value="value head: expected return of the acting agent"),
        observation=_observation(policy, inputs[0]["dtype"]), num_actions=policy.spec.num_actions,
        legal_mask=LEGAL_MASK, recurrent=False, network=network, policy=dict(source=policy.source, step=policy.step),
    )


def write_json(path: str, data: dict) -> None:
    """`data` as indented JSON at `path`, atomically (a reader never sees half a file)."""
    storage.write_json(path, data, indent=2)


def write(policy: Policy, path: str, extra: dict | None = None) -> dict:
    """Write `policy` to `path` (.onnx) and its sidecar, with `extra` entries added, to `path`.json;
    returns the sidecar."""
    return write_exported(policy, path, extra, policy_model, describe)


def write_exported(policy: Any, path: str, extra: dict | None, build: Callable[[Any], Any],
                   describe_model: Callable[[Any, Any], dict]) -> dict:
    """What every exporter's `write` does: `build(policy)` its graph, `describe_model(policy, model)` it, add
    `extra`, write the graph to `path` and the sidecar to `path`.json, each atomically; returns the sidecar."""
    import onnx  # optional-heavy: onnx loads only when a graph is written or read

    model = build(policy)
    sidecar = dict(describe_model(policy, model), **(extra or {}))
    onnx.save(model, path + ".tmp")
    os.replace(path + ".tmp", path)
    write_json(path + ".json", sidecar)
    return sidecar
