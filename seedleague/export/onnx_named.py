"""One feed-forward protocol v2 (named) policy as an ONNX graph, and the JSON sidecar that says how to feed it.

The graph is the named network of a `seedleague.artifacts.named.NamedPolicy`
(named observation tensors in, one output per action head) traced by jax2onnx with its params
baked in as constants, for any batch size B, under the names of the spec (names never hold "/"):

    inputs   <tensor>              [B, *shape]     one per observation tensor, of its dtype (64-bit types as 32-bit)
             <tensor>/mask         [B, E] bool     each masked tensor's entity mask, True where the slot is valid
             <head>/legal_mask     [B, n] bool     each discrete head that declares a legal mask, True where legal
    outputs  for each discrete head, in the spec's order:
             <head>/logits         [B, n] float32  the head's logits, no mask applied
             <head>/masked_logits  [B, n] float32  logits, illegal actions -inf (only a head with a legal mask)
             <head>/probabilities  [B, n] float32  softmax over the legal actions; illegal exactly 0
             <head>/action         [B] int32       the greedy action: the legal action of the largest logit
             for each continuous head, a Box [low, high] of d dimensions:
             <head>/mean           [B, d] float32  the Gaussian's mean, in units of the Box (centre 0, half-width 1)
             <head>/log_std        [B, d] float32  its log standard deviation, clipped to [-5, 2], in the same units
             <head>/action         [B, d] float32  the greedy action, inside the Box: centre + half * tanh(mean) for a
                                                   "squashed" head, clip(centre + half * mean, low, high) for "clipped"
             value                 [B] float32     the value head

These are the numbers `NamedPolicy` computes: `act(observation, legal_mask, greedy=True)` is
every head's action output and `value(observation)` the value (tests/test_export_named.py
checks them in onnxruntime). Usage:

    model = policy_model(policy)          # onnx.ModelProto; UnsupportedPolicyError names what cannot be exported
    sidecar = describe(policy, model)     # dict, written next to the .onnx as <file>.json
    write(policy, "policy.onnx")          # both files, atomically; returns the sidecar
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from seedleague.checkpoint_meta import spec_to_json
from seedleague.export.onnx_policy import BATCH, OPSET, graph_tensors, input_scaling, quiet_exporter, write_exported
from seedleague.rl.encoders import encoder_kind, image_layout
from seedleague.rl.named_spec import ContinuousHead, DiscreteHead, mask_key
from seedleague.artifacts.named import NamedPolicy

VALUE = "value"
LEGAL_MASK_SUFFIX = "/legal_mask"
DISCRETE_OUTPUTS = ("logits", "masked_logits", "probabilities", "action")  # masked_logits: with a legal mask only
CONTINUOUS_OUTPUTS = ("mean", "log_std", "action")
# The encoder kinds (seedleague.rl.encoders.encoder_kind) whose export tests/test_export_named.py checks
# against the JAX network; a new kind joins once its parity is tested.
EXPORTED_ENCODERS = ("vector", "image", "entities")
# The sidecar entries every member of a mixture shares (seedleague.export.cli writes them once in its index).
MIXTURE_KEYS = ("format", "opset", "protocol", "inputs", "outputs", "output_meaning", "observation", "action",
                "legal_mask", "spec", "recurrent")

LEGAL_MASK = (
    "each discrete head that declares a legal mask has an input <head>/legal_mask: [B, n] bool, True where the "
    "action is legal. <head>/masked_logits sets illegal actions to -inf and <head>/probabilities is the softmax over "
    "the legal actions only, so an illegal action has probability exactly 0; every row needs at least one legal "
    "action (a row of all False gives NaN probabilities). A discrete head without a legal mask has every action legal."
)
_OUTPUT_MEANING = {
    "<head>/logits": "a discrete head's logits, unmasked",
    "<head>/masked_logits": "a discrete head's logits with illegal actions -inf (a head with a legal mask only)",
    "<head>/probabilities": "a discrete head's softmax over its legal actions",
    "<head>/action": "the head's greedy action (NamedPolicy.act(..., greedy=True)): a discrete head's legal "
                     "argmax; a continuous head's mode mapped into its Box (see action.heads[].sample)",
    "<head>/mean": "a continuous head's Gaussian mean, in units of its Box (0 is the centre, +-1 the bounds)",
    "<head>/log_std": "a continuous head's Gaussian log standard deviation, clipped to [-5, 2], in units of its Box",
    VALUE: "value head: expected return of the acting agent",
}
_SAMPLE = {
    "squashed": "u = mean + exp(log_std) * normal(); action = centre + half * tanh(u) (then clip to [low, high] "
                "against float rounding); greedy: u = mean",
    "clipped": "x = mean + exp(log_std) * normal(); action = clip(centre + half * x, low, high); greedy: x = mean",
}
_LAYOUTS = {
    "vector": "any layout: flattened in C (row-major) order and fed to the dense torso",
    "entities": "[E, F]: E entity slots of F features each; a set (the order of the valid slots does not matter) and "
                "masked-out slots are ignored, whatever they hold",
}


class UnsupportedPolicyError(ValueError):
    """A named policy the ONNX export cannot write; the message says why and what to use instead."""


def legal_mask_input(head: str) -> str:
    """The graph input that carries discrete head `head`'s legal mask."""
    return head + LEGAL_MASK_SUFFIX


def input_names(policy: NamedPolicy) -> list[str]:
    """The graph's inputs in order: the observation's arrays (entity masks included), then the legal masks."""
    legal = [legal_mask_input(h.name) for h in policy.spec.action.discrete if h.has_legal_mask]
    return list(policy.spec.observation.arrays()) + legal


def head_outputs(head) -> list[str]:
    """One head's graph outputs: DISCRETE_OUTPUTS (masked_logits only with a legal mask) or CONTINUOUS_OUTPUTS."""
    if isinstance(head, ContinuousHead):
        return [f"{head.name}/{kind}" for kind in CONTINUOUS_OUTPUTS]
    return [f"{head.name}/{kind}" for kind in DISCRETE_OUTPUTS if head.has_legal_mask or kind != "masked_logits"]


def output_names(policy: NamedPolicy) -> list[str]:
    """The graph's outputs in order: each head's (head_outputs), then the value."""
    return [name for head in policy.spec.action.heads for name in head_outputs(head)] + [VALUE]


def check_exportable(policy: NamedPolicy) -> None:
    """Raise UnsupportedPolicyError naming the tensor when an encoder is not one the export has been checked on,
    or an observation tensor is named like the value output."""
    where = f"{policy.source or 'this policy'} ({policy.spec.env_name})"
    for tensor in policy.spec.observation.tensors:
        kind = encoder_kind(tensor)
        if kind not in EXPORTED_ENCODERS:
            raise UnsupportedPolicyError(
                f"{where}: observation tensor {tensor.name!r} has a {kind!r} encoder, which seedleague export has "
                f"not been checked on (it exports {', '.join(EXPORTED_ENCODERS)} encoders); use the policy through "
                "seedleague.api.load_trained or `seedleague serve`, or add the encoder's ONNX parity test and list "
                "it in seedleague.export.onnx_named.EXPORTED_ENCODERS")
        if tensor.name == VALUE:
            raise UnsupportedPolicyError(
                f"{where}: observation tensor {VALUE!r} has the name of the graph's value output, and an ONNX graph "
                "cannot have an input and an output of one name; rename the tensor in the worker's spec (and "
                "retrain), or use the policy through seedleague.api.load_trained or `seedleague serve`")


def _forward(policy: NamedPolicy, arrays: dict) -> list[jax.Array]:
    """What the graph computes, in output_names order: the network over one time step, then each head's outputs."""
    spec, network = policy.spec, policy.network
    observation = {key: arrays[key][:, None] for key in spec.observation.arrays()}
    legal = {h.name: arrays[legal_mask_input(h.name)] for h in spec.action.discrete if h.has_legal_mask}
    first = jnp.ones((arrays[spec.observation.tensors[0].name].shape[0], 1), bool)
    outputs, value, _ = network.apply(policy.params, observation, first, ())
    outputs = {name: x[:, 0] for name, x in outputs.items()}
    greedy = network.heads.mode(outputs, legal)
    results = []
    for head in spec.action.heads:
        params = outputs[head.name]
        if isinstance(head, DiscreteHead):
            if head.has_legal_mask:
                masked = jnp.where(legal[head.name], params, -jnp.inf)
                results += [params, masked, jax.nn.softmax(masked, axis=-1), greedy[head.name]]
            else:
                results += [params, jax.nn.softmax(params, axis=-1), greedy[head.name]]
        else:
            mean, log_std = network.heads.distributions[head.name].split(params)
            results += [mean, log_std, greedy[head.name]]
    return results + [value[:, 0]]


def _encoders(policy: NamedPolicy) -> str:
    return ", ".join(f"{t.name!r}: {encoder_kind(t)}" for t in policy.spec.observation.tensors)


def policy_model(policy: NamedPolicy) -> Any:
    """The ONNX ModelProto of `policy` (inputs and outputs as in the module docstring), checked by onnx.
    Raises UnsupportedPolicyError for what check_exportable refuses or jax2onnx cannot convert."""
    import onnx  # optional-heavy: onnx and jax2onnx load only when a policy is exported
    from jax2onnx import to_onnx  # optional-heavy: as above

    check_exportable(policy)
    spec = policy.spec
    batch = jax.export.symbolic_shape(BATCH)[0]
    inputs = [jax.ShapeDtypeStruct((batch, *shape), jax.dtypes.canonicalize_dtype(dtype))  # 64 -> 32 bits
              for shape, dtype in spec.observation.arrays().values()]
    inputs += [jax.ShapeDtypeStruct((batch, h.num_actions), np.bool_)
               for h in spec.action.discrete if h.has_legal_mask]
    names = input_names(policy)
    try:
        with quiet_exporter():
            model = to_onnx(lambda *xs: _forward(policy, dict(zip(names, xs))), inputs,
                            model_name="seedleague_named_policy", opset=OPSET, input_names=names,
                            output_names=output_names(policy))
    except NotImplementedError as error:  # jax2onnx has no lowering for an operation the network uses
        raise UnsupportedPolicyError(
            f"{policy.source or 'this policy'} ({spec.env_name}): jax2onnx cannot convert its network (encoders "
            f"{_encoders(policy)}): {error}; use the policy through seedleague.api.load_trained or `seedleague serve`"
        ) from error
    model.producer_name = "seedleague"
    model.doc_string = (f"seedleague protocol v2 policy for {spec.env_name} (learner step {policy.step}); "
                        "see the .json sidecar")
    onnx.checker.check_model(model)
    return model


def _tensor(tensor, graph_dtype: str, squash: bool) -> dict:
    """How to build one observation tensor's input (and its mask's), as the env worker sends it."""
    kind, dtype = encoder_kind(tensor), np.dtype(tensor.dtype)
    if kind == "image":
        layout = ("[C, H, W] planes, channels first" if image_layout(tensor.shape) == "CHW" else
                  "[H, W, C] frames, channels last")
    else:
        layout = _LAYOUTS[kind]
    scaling = input_scaling(dtype, graph_dtype, squash)
    return dict(name=tensor.name, shape=list(tensor.shape), dtype=graph_dtype, env_dtype=dtype.name, encoder=kind,
                layout=layout, scaling=scaling, mask=mask_key(tensor.name) if tensor.masked else None)


def _head(head, continuous: str) -> dict:
    """What one action head's outputs mean and how to act on them."""
    outputs = head_outputs(head)
    if isinstance(head, DiscreteHead):
        return dict(name=head.name, kind="discrete", num_actions=head.num_actions, outputs=outputs,
                    legal_mask=legal_mask_input(head.name) if head.has_legal_mask else None,
                    sample=f"draw from {head.name}/probabilities; greedy: {head.name}/action")
    assert isinstance(head, ContinuousHead)
    low, high = np.asarray(head.low, np.float32), np.asarray(head.high, np.float32)
    return dict(name=head.name, kind="continuous", size=head.size, low=list(head.low), high=list(head.high),
                centre=((high + low) / 2).tolist(), half=((high - low) / 2).tolist(), distribution=continuous,
                outputs=outputs, sample=_SAMPLE[continuous])


def describe(policy: NamedPolicy, model: Any) -> dict:
    """The sidecar of `policy`'s exported `model`: inputs, outputs, observation tensors, action heads, spec, origin."""
    inputs = graph_tensors(model.graph.input)
    dtypes = {i["name"]: i["dtype"] for i in inputs}
    spec, continuous = policy.spec, policy.network.heads.continuous
    encoding = ("the named tensors the env worker sends the host for this agent (seedleague.protocol.named."
                "NamedEnvSpec), one row per agent (env and seat) to act; actions are what the worker takes back "
                "for each head (a discrete head's index, a continuous head's float32 vector)")
    return dict(
        format="onnx", opset=OPSET, producer="seedleague", protocol=2, inputs=inputs,
        outputs=graph_tensors(model.graph.output), output_meaning=_OUTPUT_MEANING,
        observation=dict(env_name=spec.env_name, encoding=encoding,
                         tensors=[_tensor(t, dtypes[t.name], policy.network_config.squash_inputs)
                                  for t in spec.observation.tensors]),
        action=dict(heads=[_head(h, continuous) for h in spec.action.heads],
                    independent="the heads are independent given the observation: act on each head on its own"),
        legal_mask=LEGAL_MASK, spec=spec_to_json(spec), recurrent=False,
        network=dict(policy.meta.get("network") or {}, continuous=continuous),
        policy=dict(source=policy.source, step=policy.step),
    )


def write(policy: NamedPolicy, path: str, extra: dict | None = None) -> dict:
    """Write `policy` to `path` (.onnx) and its sidecar, with `extra` entries added, to `path`.json;
    returns the sidecar."""
    return write_exported(policy, path, extra, policy_model, describe)
