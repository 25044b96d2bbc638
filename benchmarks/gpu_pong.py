"""Atari Pong on one GPU: frames/s through the full gRPC path, to hold against SEED RL's.

    python -m benchmarks.gpu_pong                                  # needs a GPU and jax[cuda12]
    python -m benchmarks.gpu_pong --workers 14 --envs-per-worker 32 --seconds 30
    python -m benchmarks.gpu_pong --allow-cpu --workers 1 --envs-per-worker 2 --seconds 3   # path check, no GPU

The host runs in this process with the Atari preset's Nature CNN and FIFO replay and
SEED RL's learner, V-trace with one step per sample (`seedleague.presets.IMAGE_VTRACE`,
not the preset's PPO epochs), on the GPU: inference batches every worker's step and
the learner trains on the same device. W worker processes (`python -m envs.gym_worker --env
ALE/Pong-v5`, envs/atari.py preprocessing) step their envs on the CPUs. Rates
are the median of one-second env-step counts at the host after a warm-up, as in
benchmarks/throughput.py; frames/s = env steps/s x 4 (frame skip).

Reference: SEED RL reports 67K frames/s on Atari with one V100 and 55 actor CPUs
(Espeholt et al. 2020, "SEED RL"). A GPU machine here has
far fewer CPUs than that; the env side sets the ceiling (see the per-worker rate).
"""

from __future__ import annotations

import argparse
import os
import sys

import jax

from benchmarks.throughput import grpc_rate
from seedleague.presets import IMAGE_VTRACE

SEED_RL_FRAMES_PER_S = 67_000  # one V100, 55 actor CPUs
FRAME_SKIP = 4
ENV_ID = "ALE/Pong-v5"


def gpu_devices() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:  # no GPU backend at all
        return []


def measure(workers: int, envs: int, learn: bool, seconds: float, warmup: float, streams: int = 1) -> dict:
    result = grpc_rate(ENV_ID, workers, envs, learn, seconds, warmup, vector="auto", streams=streams,
                       learner=IMAGE_VTRACE)
    frames = FRAME_SKIP * result["rate"]
    return dict(mode="with learner" if learn else "inference only", workers=workers, envs=envs, streams=streams,
                env_steps_per_s=result["rate"], frames_per_s=frames, of_seed=frames / SEED_RL_FRAMES_PER_S,
                batch=result["batch"], learner_steps_per_s=result["learner_steps_per_s"] if learn else 0.0,
                copies=result["copies"])


def table(rows: list[dict]) -> str:
    lines = ["| mode | workers x envs | streams each | env steps/s | frames/s | of SEED RL's 67K | inference batch | learner updates/s "
             "| copies per forward in / out (arrays each) | bytes per env step in / out |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    lines += [f"| {r['mode']} | {r['workers']} x {r['envs']} | {r['streams']} | {r['env_steps_per_s']:,.0f} | {r['frames_per_s']:,.0f} "
              f"| {100 * r['of_seed']:.0f}% | {r['batch']:.0f} | {r['learner_steps_per_s']:.1f} "
              f"| {c['in_per_forward']:.2f} ({c['arrays_in']:.0f}) / {c['out_per_forward']:.2f} ({c['arrays_out']:.0f}) "
              f"| {c['bytes_in_per_step']:,.0f} / {c['bytes_out_per_step']:,.0f} |"
              for r in rows for c in [r["copies"]]]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                        help="env worker processes (default: CPUs - 2, leaving two for the host)")
    parser.add_argument("--envs-per-worker", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement window per row")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds after the first step before measuring")
    parser.add_argument("--modes", default="inference,learn", help="inference and/or learn")
    parser.add_argument("--streams", default="1", help="comma-separated streams per worker (`envs.gym_worker --streams`)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU anyway (checks the path; not the benchmark)")
    args = parser.parse_args(argv)
    gpus = gpu_devices()
    if not gpus and not args.allow_cpu:
        platforms = sorted({d.platform for d in jax.devices()})
        print(f"benchmarks/gpu_pong.py needs a GPU: JAX sees only {', '.join(platforms)} devices here. Run it on a "
              f"machine with a CUDA GPU and `pip install -U 'jax[cuda12]'` (or --allow-cpu to check the path).",
              file=sys.stderr)
        return 2
    device = gpus[0].device_kind if gpus else f"{jax.devices()[0].platform} (--allow-cpu: not the benchmark)"
    print(f"{ENV_ID}, Nature CNN on {device}, {os.cpu_count()} CPUs, median over {args.seconds:g} s windows\n")
    rows = [measure(args.workers, args.envs_per_worker, mode == "learn", args.seconds, args.warmup, int(streams))
            for mode in args.modes.split(",") for streams in args.streams.split(",")]
    print(table(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
