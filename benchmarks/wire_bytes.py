"""Bytes on the wire per env step: one StepBatch and its ActionBatch, encoded by the codec, over the envs.

    python -m benchmarks.wire_bytes
    python -m benchmarks.wire_bytes --envs 1,64 --rate 16750     # also MB/s at 16,750 env steps/s

Sizes are the protobuf messages (`ByteSize()` of what `codec.encode_step` and
`codec.encode_actions` build, with a 32-character session id) plus gRPC's 5-byte
length prefix per message; HTTP/2 frame headers (9 bytes per 16 KiB frame) and
TCP/IP headers are not counted. No compression: the protocol sends raw tensors.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks.workloads import WORKLOADS, Workload
from seedleague.protocol import codec
from seedleague.protocol.specs import ActionBatch, zero_step

GRPC_PREFIX_BYTES = 5  # compressed flag + 4-byte length, before every message on a stream


def bytes_per_round_trip(workload: Workload, num_envs: int) -> tuple[int, int]:
    """(StepBatch bytes, ActionBatch bytes) for one lockstep round trip of `num_envs` envs."""
    spec = workload.spec(num_envs)
    step = zero_step(spec, session_id="0" * 32, sequence=1_000_000, acting=workload.has_legal_mask)
    rng = np.random.default_rng(0)
    step.reward = rng.standard_normal(step.reward.shape).astype(np.float32)
    actions = ActionBatch(sequence=1_000_000, action=np.zeros((num_envs, workload.num_seats), np.int32),
                          policy_version=100_000)
    return codec.encode_step(step).ByteSize(), codec.encode_actions(actions).ByteSize()


def measure(workload: Workload, envs) -> list[dict]:
    rows = []
    for num_envs in envs:
        step, action = bytes_per_round_trip(workload, num_envs)
        total = step + action + 2 * GRPC_PREFIX_BYTES
        rows.append(dict(workload=workload.name, envs=num_envs, step_bytes=step, action_bytes=action,
                         per_env_step=total / num_envs, payload=_payload(workload)))
    return rows


def _payload(workload: Workload) -> int:
    """Bytes of the observation alone per env step: the floor any protocol pays without compression."""
    agents = workload.num_seats
    return agents * int(np.prod(workload.observation_shape)) * np.dtype(workload.observation_dtype).itemsize


def table(rows: list[dict], rate: float = 0.0) -> str:
    extra = f" | MB/s at {rate:,.0f} env steps/s" if rate else ""
    lines = ["| workload | envs per message | StepBatch B | ActionBatch B | bytes per env step | observation alone"
             + extra + " |", "|---|---:|---:|---:|---:|---:|" + ("---:|" if rate else "")]
    for r in rows:
        mbps = f" | {r['per_env_step'] * rate / 1e6:,.1f}" if rate else ""
        lines.append(f"| {r['workload']} | {r['envs']} | {r['step_bytes']:,} | {r['action_bytes']:,} "
                     f"| {r['per_env_step']:,.1f} | {r['payload']:,}{mbps} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="cartpole,kuhn,atari", help=f"comma-separated, of {','.join(WORKLOADS)}")
    parser.add_argument("--envs", default="1,16,64,256", help="envs per worker message")
    parser.add_argument("--rate", type=float, default=0.0, help="also print MB/s at this many env steps/s")
    args = parser.parse_args(argv)
    envs = [int(e) for e in args.envs.split(",")]
    rows = [row for name in args.workloads.split(",") for row in measure(WORKLOADS[name], envs)]
    print(table(rows, args.rate), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
