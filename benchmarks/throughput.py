"""Env steps/s through the full gRPC path, inference-only and with the learner, beside the in-process limits.

    python -m benchmarks.throughput                      # the full table (about 8 minutes)
    python -m benchmarks.throughput --workers 1 --envs 64 --seconds 5
    python -m benchmarks.throughput --protocols 1,2      # CartPole's workers on protocol v1, then on v2
    python -m benchmarks.throughput --native-stream off,on --inference-only   # workers on grpcio's stream, then the native one

For each envs-per-worker count two in-process limits step a vector env with the
host's jitted policy in one process, no gRPC: gymnasium's `SyncVectorEnv` of
single envs, and the env's native vectorised class where it has one
(`gym.make_vec(..., vectorization_mode="vector_entry_point")`, e.g. CartPole's).
The percentages are of the faster of the two, the honest limit. The gRPC rows run
the host in this process and W worker processes (`python -m envs.gym_worker
--vector MODE`, auto by default: the native env where there is one), count env
steps at the host over a window after a warm-up (and, with the learner, after
its first update), and report the median of the per-second rates in that window.
`--protocols 1,2` measures each gRPC row with the workers on protocol v1 and on v2
(`envs.gym_worker --protocol 2`: the same workload as a v1-shaped v2 spec).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import statistics
import subprocess
import sys
import time

import jax
import numpy as np

from envs.gym_vector import has_native_vector_env, make_vector_env
from seedleague.host.host import Host
from seedleague.host.policy import InferencePolicy
from seedleague.host.transfers import TransferCounts
from seedleague.metrics import Metrics
from seedleague.presets import preset_for
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.networks import make_network
from seedleague.testing.server_thread import ServerThread


def in_process_rate(env_id: str, num_envs: int, seconds: float, mode: str) -> float:
    """Steps/s of the `mode` vector env ("sync", "native") driven by the host's jitted policy, in this process."""
    preset = preset_for(env_id).host
    envs, _ = make_vector_env(env_id, num_envs, mode)  # what `envs.gym_worker --vector MODE` steps
    shape = envs.single_observation_space.shape
    network = make_network(preset.network, shape, np.float32, int(envs.single_action_space.n))
    policy = InferencePolicy(network, network.init(jax.random.key(0)), 0, seed=0)
    bucket = preset.batcher.bucket(num_envs)
    observation, _ = envs.reset(seed=0)
    first = np.ones(bucket, bool)
    legal = np.ones((bucket, int(envs.single_action_space.n)), bool)
    core = network.initial_state(bucket)
    padded = np.zeros((bucket,) + shape, np.float32)

    def one_step():
        nonlocal observation, core
        padded[:num_envs] = observation
        out = policy.act(padded, first, core, legal)
        core = out.core_state
        observation, _, terminated, truncated, _ = envs.step(out.action[:num_envs])
        first[:num_envs] = terminated | truncated

    for _ in range(50):
        one_step()
    rates, window_start = [], time.perf_counter()
    end = window_start + seconds
    while time.perf_counter() < end:
        start, steps = time.perf_counter(), 0
        while time.perf_counter() - start < 1.0:
            one_step()
            steps += num_envs
        rates.append(steps / (time.perf_counter() - start))
    envs.close()
    return statistics.median(rates)


def copies_per_forward(before: TransferCounts, after: TransferCounts, env_steps: int) -> dict:
    """The inference side's host-device copies over a window: per forward pass (on an accelerator one buffer
    each way when every input is under 256 KiB, else one per array; seedleague.host.packing), the arrays they
    carry, and bytes per env step each way."""
    forwards = max(after.to_device - before.to_device, 1)
    steps = max(env_steps, 1)
    return dict(forwards=forwards, in_per_forward=(after.to_device_buffers - before.to_device_buffers) / forwards,
                out_per_forward=(after.to_host_buffers - before.to_host_buffers) / forwards,
                arrays_in=(after.to_device_arrays - before.to_device_arrays) / forwards,
                arrays_out=(after.to_host_arrays - before.to_host_arrays) / forwards,
                bytes_in_per_step=(after.to_device_bytes - before.to_device_bytes) / steps,
                bytes_out_per_step=(after.to_host_bytes - before.to_host_bytes) / steps)


def grpc_rate(
    env_id: str, workers: int, num_envs: int, learn: bool, seconds: float, warmup: float, vector: str,
    protocol: int = 0, streams: int = 1, native_stream: str = "auto", learner: LearnerConfig | None = None,
) -> dict:
    """Median env steps/s at the host with `workers` worker processes of `num_envs` envs each, each stepping them
    as `streams` groups on streams of their own (`envs.gym_worker --streams`); `learner` in place of the preset's."""
    preset = preset_for(env_id).host
    config = dataclasses.replace(preset, learn=learn, seed=0, learner=learner or preset.learner)
    metrics = Metrics()
    host = Host(config, metrics)
    server = ServerThread(host).start()
    command = [sys.executable, "-m", "envs.gym_worker", "--address", server.address, "--env", env_id,
               "--num-envs", str(num_envs), "--vector", vector, "--protocol", str(protocol), "--streams", str(streams),
               "--native-stream", native_stream]
    procs = [subprocess.Popen(command + ["--seed", str(i)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i in range(workers)]
    try:
        deadline = time.perf_counter() + 60
        while metrics.env_steps == 0 and time.perf_counter() < deadline:
            time.sleep(0.1)
        # With the learner, inserts wait for its first (compiled) update: measure after it.
        deadline = time.perf_counter() + 180
        while learn and metrics.learner_steps == 0 and time.perf_counter() < deadline:
            time.sleep(0.1)
        time.sleep(warmup)
        rates, batches = [], []
        steps_before, copies_before = metrics.env_steps, host.pipeline.policy.transfers.counts()
        for _ in range(int(seconds)):
            before = metrics.env_steps
            time.sleep(1.0)
            rates.append(metrics.env_steps - before)
            report = metrics.report()
            batches.append(report.get("inference_batch", 0.0))
        return dict(rate=statistics.median(rates), batch=statistics.median(batches),
                    learner_steps_per_s=report.get("learner_steps_per_s", 0.0),
                    copies=copies_per_forward(copies_before, host.pipeline.policy.transfers.counts(),
                                              metrics.env_steps - steps_before))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        server.stop()
        host.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    parser.add_argument("--envs", default="16,64,256", help="comma-separated envs-per-worker counts")
    parser.add_argument("--seconds", type=float, default=6.0, help="measurement window per row")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds after the first step before measuring")
    parser.add_argument("--vector", default="auto", choices=["auto", "native", "sync", "async"],
                        help="the workers' --vector (default auto: the native vector env where there is one)")
    parser.add_argument("--protocols", default="1", help="comma-separated worker protocol versions (1, 2)")
    parser.add_argument("--streams", default="1",
                        help="comma-separated streams per worker (`envs.gym_worker --streams`: its envs as that many "
                             "groups, one stepping while the others wait for the host)")
    parser.add_argument("--native-stream", default="auto",
                        help="comma-separated worker --native-stream modes (auto, on, off): on exchanges each step "
                             "in C++ (`make native-stream`), off through grpcio's stream")
    parser.add_argument("--inference-only", action="store_true",
                        help="skip the rows with the learner running (half the time)")
    args = parser.parse_args(argv)
    protocols = [int(p) for p in args.protocols.split(",")]
    stream_counts = [int(k) for k in args.streams.split(",")]
    native_modes = args.native_stream.split(",")
    workers = [int(w) for w in args.workers.split(",")]
    envs = [int(e) for e in args.envs.split(",")]
    native = has_native_vector_env(args.env)
    print(f"{args.env}, {jax.devices()[0].platform} JAX, workers --vector {args.vector}, "
          f"median env steps/s over {args.seconds:g} s windows; % of the faster in-process limit\n")
    print("| envs/worker | limit: sync vector env | limit: native vector env | workers | streams each | protocol "
          "| native stream | inference only | % of limit | with learner | % of limit | learner updates/s |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for num_envs in envs:
        sync_limit = in_process_rate(args.env, num_envs, args.seconds, "sync")
        native_limit = in_process_rate(args.env, num_envs, args.seconds, "native") if native else None
        limit = max(sync_limit, native_limit or 0.0)
        native_text = f"{native_limit:,.0f}" if native_limit else "none"
        for count, protocol, streams, mode in itertools.product(workers, protocols, stream_counts, native_modes):
            version = 2 if protocol == 2 else 0
            infer, *learned_rows = (grpc_rate(args.env, count, num_envs, learning, args.seconds, args.warmup,
                                              args.vector, version, streams, mode)
                                    for learning in ((False,) if args.inference_only else (False, True)))
            learn = learned_rows[0] if learned_rows else None
            learned = "| - | - | - |" if learn is None else (
                f"| {learn['rate']:,.0f} | {100 * learn['rate'] / limit:.0f}% | {learn['learner_steps_per_s']:.0f} |")
            print(f"| {num_envs} | {sync_limit:,.0f} | {native_text} | {count} | {streams} | {protocol} | {mode} "
                  f"| {infer['rate']:,.0f} | {100 * infer['rate'] / limit:.0f}% {learned}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
