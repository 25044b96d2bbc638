"""The worker-side SDK for protocol v2: named observation tensors in, one action per named head out.

    spec = NamedEnvSpec("mygame", ObservationSpec(...), ActionSpec(...), num_envs=8)
    client = NamedWorkerClient(ClientConfig(address="127.0.0.1:50051"), spec)
    client.connect()
    actions = client.step({"vector": v, "screen": s}, reward, terminated, truncated,
                          final_observation={...})     # {"move": [E, S] int32, "aim": [E, S, d] float32}

Arrays are [E, S, ...] (with one seat, [E, ...] too). `final_observation` holds,
for the envs reported truncated (and not terminated), their episodes' last
observations, [K, S, ...] in env order; `episode_stats` one [E, S] float array
per declared stat. Connection handling, errors and backoff are `WorkerClient`'s
(seedleague.protocol.client). Against a host that has no v2 service
(UNIMPLEMENTED), a v1-shaped spec falls back to protocol v1 with the same calls;
`protocol=1` speaks v1 from the start (a v1-shaped spec: one unmasked tensor, one
discrete head, no episode stats or teams). Either way the caller sees only named
tensors and heads: v1's `WorkerClient` is the adapter at the wire edge.
"""

from __future__ import annotations

from typing import Any, Optional

import grpc
import numpy as np

from seedleague.protocol import codec_v2
from seedleague.protocol.codec import encode_tensor
from seedleague.protocol.client import ClientConfig, ConnectionLost, HostRefused, WorkerClient, _Slot
from seedleague.protocol.errors import FAILED_PRECONDITION, ProtocolError
from seedleague.protocol.named import (PROTOCOL_VERSION_V2, NamedEnvSpec,
                                       NamedStepBatch, check_named_actions, v1_of_named,
                                       zero_named_step)
from seedleague.v2 import env_pb2, env_pb2_grpc


def _with_seats(name: str, array, shape: tuple[int, ...], dtype, seatless_ok: bool) -> np.ndarray:
    """`array` as `dtype` of `shape` ([rows, S, ...]); [rows, ...] is accepted when there is one seat."""
    array = np.asarray(array)
    if array.shape != shape:
        seatless = shape[:1] + shape[2:]
        if not (seatless_ok and array.shape == seatless):
            raise ValueError(f"{name} has shape {array.shape}, expected {shape}")
        array = array.reshape(shape)
    return array.astype(dtype, copy=False)


class NamedWorkerClient(WorkerClient):
    """One v2 worker's session with a host (see the module docstring). Thread-safety as WorkerClient."""

    def __init__(self, config: ClientConfig, spec: NamedEnvSpec, protocol: int = PROTOCOL_VERSION_V2):
        """`protocol` 2: v2, and v1 against a host without v2 where the spec has v1's form; 1: v1 (such a spec
        only; ValueError otherwise)."""
        super().__init__(config, spec)
        self._v1_spec = v1_of_named(spec)
        if protocol not in (1, PROTOCOL_VERSION_V2) or (protocol == 1 and self._v1_spec is None):
            raise ValueError(f"protocol must be 2, or 1 for a spec of v1's form (one unmasked tensor, one discrete "
                             f"head, no episode stats or teams); got {protocol} for {spec.env_name}'s spec")
        self.protocol_version = protocol  # 1 also after falling back to a host without v2
        self._v1: Optional[WorkerClient] = WorkerClient(config, self._v1_spec) if protocol == 1 else None

    @staticmethod
    def _make_slots(spec: Any) -> dict:
        """Each per-step input's wire dtype and accepted shapes, keyed by field ("observation/NAME", "reward",
        "legal_mask/HEAD", "episode_stats/NAME", ...): a step checks and converts its arrays by these."""
        agents = (spec.num_envs, spec.num_seats)

        def slot(name, shape, dtype, has_seat=True):
            seatless = shape[:1] + shape[2:] if spec.num_seats == 1 and has_seat else None
            return _Slot(name, shape, seatless, np.dtype(dtype).newbyteorder("<"))

        slots = {f"observation/{k}": slot(f"observation[{k!r}]", agents + shape, dtype)
                 for k, (shape, dtype) in spec.observation.arrays().items()}
        slots.update({"reward": slot("reward", agents, np.float32),
                      "terminated": slot("terminated", (spec.num_envs,), bool, has_seat=False),
                      "truncated": slot("truncated", (spec.num_envs,), bool, has_seat=False),
                      "acting": slot("acting", agents, bool)})
        slots.update({f"legal_mask/{h.name}": slot(f"legal_mask[{h.name!r}]", agents + (h.num_actions,), bool)
                      for h in spec.action.discrete if h.has_legal_mask})
        slots.update({f"episode_stats/{n}": slot(f"episode_stats[{n!r}]", agents, np.float32)
                      for n in spec.episode_stats})
        return slots

    def connect(self) -> None:
        """Handshake (v2, or v1 where asked or the host has no v2 and the spec allows) and open the stream."""
        if self._v1 is None:
            try:
                super().connect()
                return
            except HostRefused as error:
                if error.code != grpc.StatusCode.UNIMPLEMENTED.name or self._v1_spec is None:
                    raise
                self._v1 = WorkerClient(self.config, self._v1_spec)
                self.protocol_version = 1
        self._v1.connect()
        self.session_id, self.host_max_message_bytes = self._v1.session_id, self._v1.host_max_message_bytes

    @property
    def stream_kind(self) -> str:
        return self._v1.stream_kind if self._v1 is not None else super().stream_kind

    def close(self) -> None:
        super().close()
        if self._v1 is not None:
            self._v1.close()

    def step(self, observation: dict, reward, terminated, truncated, legal_mask: Optional[dict] = None,
             acting=None, final_observation: Optional[dict] = None, episode_stats: Optional[dict] = None) -> dict:
        """Send one step of every env; return the host's actions, one array per head (see the module docstring)."""
        if self._v1 is not None:
            return self._step_v1(observation, reward, terminated, truncated, legal_mask, acting)
        stream = self._stream
        if stream is None:
            raise ConnectionLost("client is closed") if self._closed else RuntimeError("call connect() before step()")
        message, acting, legal = self._encode(observation, reward, terminated, truncated, legal_mask or {}, acting,
                                              final_observation or {}, episode_stats or {})
        reply = self._exchange(stream, message)
        actions = self._check_named_reply(reply, acting, legal)
        self._sequence += 1
        self.policy_version = reply.policy_version
        return actions

    def _encode(self, observation, reward, terminated, truncated, legal_mask, acting, final_observation,
                episode_stats) -> tuple[env_pb2.StepBatch, Optional[np.ndarray], dict]:
        """This step's message (a copy of the template with each tensor's data bytes set), and its acting
        flags and legal masks as [E, S, ...] arrays for checking the answer; ValueError naming a bad input."""
        spec, slots, one = self.spec, self._slots, self.spec.num_seats == 1
        arrays = spec.observation.arrays()
        missing = [k for k in arrays if k not in observation]
        if missing or len(observation) != len(arrays):
            raise ValueError(f"observation must hold exactly {list(arrays)}, got {sorted(observation)}")
        masked = [h.name for h in spec.action.discrete if h.has_legal_mask]
        if sorted(legal_mask) != sorted(masked):
            raise ValueError(f"legal_mask must hold one mask per head that declares one {masked}, "
                             f"got {sorted(legal_mask)}")
        message = env_pb2.StepBatch()
        message.CopyFrom(self._template)  # a fresh message each step, as WorkerClient says why
        for item in message.observation:
            item.tensor.data = slots[f"observation/{item.name}"].encode(observation[item.name])
        message.reward.data = slots["reward"].encode(reward)
        ended = [_with_seats(name, flags, (spec.num_envs,), bool, False)
                 for name, flags in (("terminated", terminated), ("truncated", truncated))]
        message.terminated.data, message.truncated.data = ended[0].tobytes(), ended[1].tobytes()
        legal = {}
        for item in message.legal_mask:
            legal[item.name] = _with_seats(f"legal_mask[{item.name!r}]", legal_mask[item.name],
                                           slots[f"legal_mask/{item.name}"].shape, bool, one)
            item.tensor.data = legal[item.name].tobytes()
        if acting is not None:
            acting = _with_seats("acting", acting, slots["acting"].shape, bool, one)
            encode_tensor(acting, message.acting)
        for item in message.episode_stats:
            stat = episode_stats.get(item.name)
            item.tensor.data = slots[f"episode_stats/{item.name}"].encode(
                np.zeros(slots["reward"].shape, np.float32) if stat is None else stat)
        count = int((ended[1] & ~ended[0]).sum())
        if count:
            if sorted(final_observation) != sorted(arrays):
                raise ValueError(f"{count} envs are truncated: final_observation must hold {list(arrays)}, got "
                                 f"{sorted(final_observation)}")
            codec_v2.encode_named({k: _with_seats(f"final_observation[{k!r}]", final_observation[k],
                                                  (count, spec.num_seats) + s, d, one)
                                   for k, (s, d) in arrays.items()}, message.final_observation)
        return message, acting, legal

    def _check_named_reply(self, reply: env_pb2.ActionBatch, acting: Optional[np.ndarray], legal: dict) -> dict:
        """The reply's actions, or ConnectionLost (after dropping the stream) if the host answered nonsense."""
        try:
            if reply.sequence != self._sequence:
                raise ProtocolError(FAILED_PRECONDITION, f"host answered sequence {reply.sequence} to step "
                                    f"{self._sequence}")
            actions = codec_v2.decode_actions(reply).action
            check_named_actions(self.spec, actions, acting, legal)
        except ProtocolError as error:
            self._teardown()
            raise ConnectionLost(f"bad answer from host: {error.message}") from None
        return actions

    def _step_v1(self, observation, reward, terminated, truncated, legal_mask, acting) -> dict:
        tensor, head = self.spec.observation.tensors[0], self.spec.action.heads[0]
        mask = (legal_mask or {}).get(head.name)
        action = self._v1.step(observation[tensor.name], reward, terminated, truncated, mask, acting)
        self.policy_version = self._v1.policy_version
        return {head.name: action}

    # -- WorkerClient's v1-specific halves, for v2 ------------------------------------------------------

    _STUB = env_pb2_grpc.EnvServiceStub
    _STREAM_METHOD = f"/{env_pb2.DESCRIPTOR.services_by_name['EnvService'].full_name}/Stream"
    _ANSWER = env_pb2.ActionBatch
    _VERSION = PROTOCOL_VERSION_V2
    _ON_SERVICE = " on seedleague.v2.EnvService"

    def _handshake_request(self) -> env_pb2.HandshakeRequest:
        return codec_v2.encode_handshake(self.spec, self.config.worker_name)

    def _largest_step_bytes(self, session_id: str) -> int:
        return codec_v2.encode_step(self._largest_step(session_id)).ByteSize()

    def _set_template(self, session_id: str) -> None:
        """The message each step copies: every named tensor's dtype and shape set, no data."""
        self._template = _without_data(codec_v2.encode_step(zero_named_step(self.spec, session_id)))

    def _largest_step(self, session_id: str) -> NamedStepBatch:
        """A step with every optional part present: acting, and every env truncated (final observations)."""
        step = zero_named_step(self.spec, session_id, acting=True)
        step.truncated[:] = True
        step.final_observation = dict(step.observation)
        return step



def _without_data(message: env_pb2.StepBatch) -> env_pb2.StepBatch:
    """`message` with every tensor's data bytes cleared: the names, dtypes and shapes each step copies."""
    for tensor in (message.reward, message.terminated, message.truncated):
        tensor.data = b""
    for field in (message.observation, message.legal_mask, message.episode_stats):
        for item in field:
            item.tensor.data = b""
    return message
