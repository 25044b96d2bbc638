"""CPU per message at the protocol's edge, v1 against v2, for a v1-shaped workload (no sockets, no env, no model).

    python -m benchmarks.protocol_edge                   # CartPole-shaped, 16, 64 and 256 envs per message
    python -m benchmarks.protocol_edge --envs 64 --repeats 9
    python -m benchmarks.protocol_edge --adapter         # only the named client's v1 adapter, the wire stubbed

What a message costs the two processes apart from gRPC, the env and the forward pass, which
are the same for both versions:
- the worker: the SDK's `step` (seedleague.protocol.client / client_v2) building, checking and
  serialising the StepBatch, then parsing, decoding and checking the host's ActionBatch;
- the host: parsing and decoding the StepBatch, checking it against the spec, for v2 the
  flat model's one action array put under its head's name (seedleague.host.named), and
  encoding and serialising the answer.
The client's stream is replaced by the host's half, in the same thread, so one loop runs both.
A third column, "v1 named", is v1 on the wire through the named client (`NamedWorkerClient(...,
protocol=1)` with dicts in and out, as `envs.worker_loop` steps every v1 game): v1's cost plus the
adapter's. Each repeat times `--messages` messages of each, alternating; the table gives medians. The throughput benchmark (`benchmarks/throughput.py --protocols 1,2`) measures the
same difference end to end, where the env, gRPC and the machine's load add their noise.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from seedleague.protocol import codec, codec_v2
from seedleague.protocol.client import ClientConfig, WorkerClient
from seedleague.protocol.client_v2 import NamedWorkerClient
from seedleague.protocol.specs import ActionBatch, EnvSpec, check_step
from seedleague.protocol.named import NamedActionBatch, check_named_step, named_of_v1
from seedleague.v1 import env_pb2 as pb1
from seedleague.v2 import env_pb2 as pb2


def host_v1(spec: EnvSpec, actions: np.ndarray):
    def answer(message):
        step = codec.decode_step(pb1.StepBatch.FromString(message.SerializeToString()))
        check_step(spec, step)
        reply = codec.encode_actions(ActionBatch(step.sequence, actions, 0))
        return pb1.ActionBatch.FromString(reply.SerializeToString())
    return answer


def host_v2(spec, actions: np.ndarray):
    def answer(message):
        step = codec_v2.decode_step(pb2.StepBatch.FromString(message.SerializeToString()))
        check_named_step(spec, step)
        head = spec.action.heads[0].name  # the flat model's one action array, under its head's name (host.named)
        reply = codec_v2.encode_actions(NamedActionBatch(step.sequence, {head: actions}, 0))
        return pb2.ActionBatch.FromString(reply.SerializeToString())
    return answer


def wired(client: WorkerClient, host) -> WorkerClient:
    """`client` as connected, its stream answered by `host` in this thread."""
    client.session_id = "bench"
    client._set_template("bench")

    class HostStream:  # the stream's place in the client: each message answered by `host` at once
        kind = "in-process"

        def exchange(self, message):
            return host(message)

    client._stream = HostStream()
    return client


def measure(envs: int, messages: int, repeats: int) -> dict:
    spec = EnvSpec("CartPole-v1", (4,), np.float32, 2, envs)
    spec2 = named_of_v1(spec)
    actions = np.zeros((envs, 1), np.int32)
    v1 = wired(WorkerClient(ClientConfig("127.0.0.1:1"), spec), host_v1(spec, actions))
    v2 = wired(NamedWorkerClient(ClientConfig("127.0.0.1:1"), spec2), host_v2(spec2, actions))
    v1_named = NamedWorkerClient(ClientConfig("127.0.0.1:1"), spec2, protocol=1)
    wired(v1_named._v1, host_v1(spec, actions))
    observation, reward, ended = np.zeros((envs, 4), np.float32), np.zeros(envs, np.float32), np.zeros(envs, bool)
    name, head = spec2.observation.tensors[0].name, spec2.action.heads[0].name
    steps = {1: lambda: v1.step(observation, reward, ended, ended),
             2: lambda: v2.step({name: observation}, reward, ended, ended),
             "1n": lambda: v1_named.step({name: observation}, reward, ended, ended, None)[head]}
    for step in steps.values():
        for _ in range(200):
            step()
    times = {version: [] for version in steps}
    for _ in range(repeats):
        for version, step in steps.items():
            start = time.perf_counter()
            for _ in range(messages):
                step()
            times[version].append((time.perf_counter() - start) / messages * 1e6)
    return {version: statistics.median(values) for version, values in times.items()}


def adapter(envs: int, calls: int, repeats: int) -> None:
    """What the named client's v1 adapter adds per message, the wire stubbed: a v1 game's step through
    `envs.worker_loop`'s exchange and `NamedWorkerClient(protocol=1)` against the same call on v1's `WorkerClient`,
    each client's inner v1 `step` replaced by one function (so only the Python around it differs); timeit's min."""
    import timeit

    from envs.worker_loop import GameStep, _exchange

    print("| legal mask | v1 client µs/message | v1 through the named client | added |\n|---|---:|---:|---:|")
    for mask in (False, True):
        spec = EnvSpec("CartPole-v1", (4,), np.float32, 2, envs, 1, mask)
        answer = np.zeros((envs, 1), np.int32)
        v1 = WorkerClient(ClientConfig("127.0.0.1:1"), spec)
        v1_named = NamedWorkerClient(ClientConfig("127.0.0.1:1"), named_of_v1(spec), protocol=1)
        v1.step = v1_named._v1.step = lambda *args: answer
        observation, legal = np.zeros((envs, 1, 4), np.float32), np.ones((envs, 1, 2), bool) if mask else None
        step = GameStep({"observation": observation}, np.zeros((envs, 1), np.float32), np.zeros(envs, bool),
                        np.zeros(envs, bool), {"action": legal} if mask else None)  # a v1 game's step, named
        before = min(timeit.repeat(lambda: v1.step(observation, step.reward, step.terminated, step.truncated,
                                                    legal, step.acting), number=calls, repeat=repeats))
        after = min(timeit.repeat(lambda: _exchange(v1_named, step), number=calls, repeat=repeats))
        before, after = before / calls * 1e6, after / calls * 1e6
        print(f"| {'yes' if mask else 'no'} | {before:.3f} | {after:.3f} | {after - before:+.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="16,64,256", help="comma-separated envs per message")
    parser.add_argument("--messages", type=int, default=2000, help="messages per version per repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--adapter", action="store_true", help="only the named client's v1 adapter (64 envs)")
    args = parser.parse_args()
    if args.adapter:
        return adapter(64, 100_000, args.repeats)
    print("| envs/message | v1 µs/message | v2 µs/message | v2 - v1 | v1 named | v1 named - v1 |\n"
          "|---:|---:|---:|---:|---:|---:|")
    for envs in (int(e) for e in args.envs.split(",")):
        median = measure(envs, args.messages, args.repeats)
        print(f"| {envs} | {median[1]:.1f} | {median[2]:.1f} | {median[2] - median[1]:+.1f} | {median['1n']:.1f} | "
              f"{median['1n'] - median[1]:+.2f} |", flush=True)


if __name__ == "__main__":
    main()
