"""The host ceiling: the host's own CPU per env step, driven by synthetic workers with no env cost.

    taskset -c 0 .venv/bin/python -m benchmarks.host_ceiling --worker-cpus 1            # the grid (the Atari CNN rows take minutes each on a CPU)
    taskset -c 0 .venv/bin/python -m benchmarks.host_ceiling --worker-cpus 1 --quick    # four rows per workload
    taskset -c 0 .venv/bin/python -m benchmarks.host_ceiling --worker-cpus 1 --workloads cartpole --workers 16 --envs 256

The host (`seedleague.host.Host` with `learn=False`: inference only, no unroll store, replay or learner) serves
in this process behind the production gRPC server (`ServerThread`). Synthetic workers run in `--procs` child
processes, each an asyncio loop holding its share of the W workers, one channel, one handshake and one lockstep
stream per worker, as separate worker processes would have. A worker sends StepBatch messages serialized once
before the run (random observations, CartPole-like rewards, an episode end in about one env step in 200) and
reads the answer bytes without decoding them, so the workers spend their CPU on gRPC alone, and none of it is
counted as the host's: the host's CPU is this process's `time.process_time()` (all its threads: gRPC, the
event loop, the batcher, XLA) over the measured window.

Each row: a fresh host; the workers handshake; every batch size the window can meet is compiled (so no XLA
compile lands in the window); a warm-up; then a window of `--seconds`. Columns: host CPU microseconds per env
step over the window, of which the forward pass (the batcher's timed `inference.forward` calls, wall-clock on
the host's core), env steps/s at the host, the host's core use (CPU seconds per second: near 1.0 the host is
the limit, below it the workers are), the mean forward-pass batch, and the answer latency p50/p99 seen by the
workers (write to read, steps sent in the window). Pin the host to one core (`taskset -c 0`) and the workers to
the others (`--worker-cpus`) so the two never share a core.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Optional

import numpy as np

from benchmarks.workloads import WORKLOADS, Workload

METHOD = "/seedleague.v1.EnvService/Stream"
EPISODE_END_PROBABILITY = 1 / 200  # per env step, about CartPole's episode length early in training
VARIANTS = 4  # distinct pre-built messages per worker process, sent in turn
GRID = {  # workload -> (workers, envs per message)
    "cartpole": ((1, 4, 16, 64, 256), (16, 64, 256, 1024)),
    "atari": ((1, 4, 16), (16, 64, 256)),
}
QUICK = {"cartpole": ((1, 16), (16, 256)), "atari": ((1, 4), (16, 64))}
TINY_NETWORK = dict(torso="mlp", hidden_sizes=(8,))  # --network tiny: the forward pass all but free


# --- the synthetic workers (child processes) -----------------------------------------------------------


def message_bodies(workload: Workload, num_envs: int, seed: int) -> list[bytes]:
    """`VARIANTS` serialized StepBatch messages without a session id (each worker prepends its own field):
    random observations, reward 1, an episode end in about one env step in `1 / EPISODE_END_PROBABILITY`."""
    from seedleague.protocol import codec
    from seedleague.protocol.specs import zero_step

    rng = np.random.default_rng(seed)
    spec = workload.spec(num_envs)
    bodies = []
    for variant in range(VARIANTS):
        step = zero_step(spec, session_id="", sequence=variant)
        if step.observation.dtype == np.uint8:
            step.observation = rng.integers(0, 256, step.observation.shape, np.uint8)
        else:
            step.observation = rng.standard_normal(step.observation.shape).astype(step.observation.dtype)
        step.reward[:] = 1.0
        step.terminated = rng.random(num_envs) < EPISODE_END_PROBABILITY
        bodies.append(codec.encode_step(step).SerializeToString())
    return bodies


async def _worker(address: str, workload: Workload, num_envs: int, bodies: list[bytes], go: asyncio.Event,
                  stop: asyncio.Event, ready: list, latencies: list) -> None:
    """One worker: handshake, open the stream, then lockstep pre-built messages until `stop`."""
    import grpc

    from seedleague.protocol import codec
    from seedleague.protocol.channel import channel_options
    from seedleague.v1 import env_pb2, env_pb2_grpc

    async with grpc.aio.insecure_channel(address, options=channel_options(1 << 30)) as channel:
        stub = env_pb2_grpc.EnvServiceStub(channel)
        reply = await stub.Handshake(codec.encode_handshake(workload.spec(num_envs), "host_ceiling"), timeout=60)
        prefix = env_pb2.StepBatch(session_id=reply.session_id).SerializeToString()
        call = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)()
        ready.append(1)
        await go.wait()
        sent = 0
        while not stop.is_set():
            start = time.monotonic()
            await call.write(prefix + bodies[sent % len(bodies)])  # the copy is the worker's CPU, not the host's
            answer = await call.read()
            latencies.append((start, time.monotonic() - start))
            if sent == 0:  # the first answer is checked; the rest are only counted
                actions = codec.decode_actions(env_pb2.ActionBatch.FromString(answer)).action
                assert actions.shape == (num_envs, 1), actions.shape
            sent += 1
        await call.done_writing()


async def _drive(args) -> dict:
    """Child mode: `args.drive_workers` workers; 'ready' on stdout once all have streams, then stdin
    'go', then stdin 'stop T0 T1' (monotonic seconds), then one JSON line of latencies inside [T0, T1]."""
    workload = WORKLOADS[args.workload]
    bodies = message_bodies(workload, args.envs, seed=args.seed)
    go, stop, ready, latencies = asyncio.Event(), asyncio.Event(), [], []
    tasks = [asyncio.ensure_future(_worker(args.drive, workload, args.envs, bodies, go, stop, ready, latencies))
             for _ in range(args.drive_workers)]
    while len(ready) < len(tasks):
        done = [t for t in tasks if t.done()]
        if done:
            done[0].result()  # a handshake failed: raise it
        await asyncio.sleep(0.01)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    go.set()
    _, t0, t1 = (await loop.run_in_executor(None, sys.stdin.readline)).split()
    stop.set()
    await asyncio.gather(*tasks)
    window = [s for t, s in latencies if float(t0) <= t <= float(t1)]
    return dict(answers=len(window), latencies_s=window)


def cpu_list(text: str) -> set[int]:
    """CPU numbers from a taskset-style list: "1", "1,3", "1-15", "0,2-5"."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and (not high.isdigit() or int(high) < int(low))):
            raise ValueError(f"--worker-cpus {text!r}: {part!r} is not a CPU number or a range like 1-15")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def _pin(cpus: Optional[str]) -> None:
    if cpus:
        os.sched_setaffinity(0, cpu_list(cpus))


# --- the host (this process) -----------------------------------------------------------------------------


def host_config(workload: Workload, workers: int, num_envs: int, network: str):
    """The workload's preset with learning off, limits wide enough for the row, and the chosen network."""
    from seedleague.host.session_limits import SessionLimits
    from seedleague.rl.network_config import NetworkConfig

    preset = workload.host()
    largest = workload.spec(num_envs)
    message_bytes = 2 * num_envs * (largest.observation_dtype.itemsize * int(np.prod(largest.observation_shape)) + 64)
    limits = SessionLimits(max_workers=max(256, workers), max_envs_per_worker=max(4096, num_envs))
    changes = dict(learn=False, seed=0, limits=limits, max_message_bytes=max(preset.max_message_bytes, message_bytes))
    if network == "tiny":
        changes["network"] = NetworkConfig(**TINY_NETWORK)
    return dataclasses.replace(preset, **changes)


def _compile_buckets(host, workload: Workload, num_envs: int, workers: int) -> None:
    """Run the policy once at every padded batch size the window can meet, before any step arrives."""
    config = host.config.batcher
    largest = config.bucket(min(workers * num_envs, config.max_batch_size))
    size = config.bucket(num_envs)
    policy, network = host.pipeline.policy, host.pipeline.network
    while size <= largest:
        observation = np.zeros((size,) + workload.observation_shape, workload.observation_dtype)
        policy.act(observation, np.ones(size, bool), network.initial_state(size), np.ones((size, workload.num_actions), bool))
        size *= 2


def _spawn(address: str, workload: str, workers: int, num_envs: int, procs: int, worker_cpus: Optional[str]):
    shares = [workers // procs + (i < workers % procs) for i in range(procs)]
    command = [sys.executable, "-m", "benchmarks.host_ceiling", "--drive", address, "--workload", workload,
               "--envs", str(num_envs)] + (["--worker-cpus", worker_cpus] if worker_cpus else [])
    return [subprocess.Popen(command + ["--drive-workers", str(share), "--seed", str(i)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True) for i, share in enumerate(shares) if share]


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process so far, summed by name (Python's thread name where it has
    one, else the kernel's: gRPC's and XLA's own threads), from /proc."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:  # the thread ended
            continue
        comm, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        name = names.get(int(tid), comm)
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return out


class ThreadProfiles:
    """cProfile of the host's event loop thread and batcher thread in CPU time (`time.thread_time`), each
    switched on at its thread's first call into the host after `start` and off at its first call after `stop`.
    Deterministic profiling slows what it profiles; read the shares, not the absolute times."""

    def __init__(self, host):
        import cProfile

        self.profiles = {"event loop": cProfile.Profile(time.thread_time), "batcher": cProfile.Profile(time.thread_time)}
        self._on, self._state = False, {"event loop": None, "batcher": None}
        step, run_batch = host.step, host.batcher._run_batch

        async def profiled_step(message):
            self._switch("event loop")
            return await step(message)

        def profiled_run_batch(requests):
            self._switch("batcher")
            return run_batch(requests)

        host.step, host.batcher._run_batch = profiled_step, profiled_run_batch

    def _switch(self, thread: str) -> None:
        if self._on and self._state[thread] is None:
            self.profiles[thread].enable()
            self._state[thread] = True
        elif not self._on and self._state[thread]:
            self.profiles[thread].disable()
            self._state[thread] = False

    def start(self) -> None:
        self._on = True

    def stop(self) -> None:
        self._on = False

    def write(self, path: str) -> None:
        import pstats

        with open(path, "w") as out:
            for thread, profile in self.profiles.items():
                out.write(f"===== {thread} thread, CPU time\n")
                pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(60)


def _profiler(path: str, seconds: float) -> subprocess.Popen:
    """py-spy sampling this process for `seconds`, as collapsed stacks: only a thread that holds the GIL (the
    Python work; gRPC's and XLA's own threads show in `--threads`), with its native frames."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy (a tool, not a dependency)")
    command = [spy, "record", "--pid", str(os.getpid()), "--duration", str(max(1, int(seconds))), "--rate", "250",
               "--gil", "--native", "--format", "raw", "--output", path]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def row(name: str, workers: int, num_envs: int, seconds: float, warmup: float, network: str, procs: int,
        worker_cpus: Optional[str], profile: Optional[str] = None) -> dict:
    """One measured configuration with a fresh host."""
    from seedleague.host.host import Host
    from seedleague.metrics import Metrics
    from seedleague.testing.server_thread import ServerThread

    workload = WORKLOADS[name]
    metrics = Metrics()
    host = Host(host_config(workload, workers, num_envs, network), metrics)
    server = ServerThread(host).start()
    children = _spawn(server.address, name, workers, num_envs, min(procs, workers), worker_cpus)
    try:
        for child in children:
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a synthetic worker process failed before its streams opened (see above)")
        _compile_buckets(host, workload, num_envs, workers)
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        time.sleep(warmup)
        metrics.report()  # resets the forward-pass means
        spy = _profiler(profile, seconds) if profile and not profile.endswith(".pstats.txt") else None
        profiles = ThreadProfiles(host) if profile and spy is None else None
        if profiles is not None:
            profiles.start()
        threads0 = thread_cpu()
        t0, cpu0, steps0, batches0 = time.monotonic(), time.process_time(), metrics.env_steps, host.batcher.batches
        time.sleep(seconds)
        t1, cpu1, steps1, batches1 = time.monotonic(), time.process_time(), metrics.env_steps, host.batcher.batches
        threads1 = thread_cpu()
        if profiles is not None:
            profiles.stop()
        report = metrics.report()
        latencies = []
        for child in children:
            child.stdin.write(f"stop {t0} {t1}\n")
            child.stdin.flush()
            latencies += json.loads(child.stdout.readline())["latencies_s"]
        for child in children:
            child.wait(30)
        if spy is not None:
            spy.wait(60)
        if profiles is not None:
            profiles.write(profile)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        server.stop()
        host.stop()
    steps = steps1 - steps0
    forward_s = report.get("inference_ms", 0.0) / 1000 * (batches1 - batches0)
    p50, p99 = np.percentile(latencies, [50, 99]) * 1000 if latencies else (float("nan"),) * 2
    return dict(workload=workload.name, workers=workers, envs=num_envs, steps=steps,
                us_per_step=1e6 * (cpu1 - cpu0) / max(steps, 1), forward_us_per_step=1e6 * forward_s / max(steps, 1),
                steps_per_s=steps / (t1 - t0), core_use=(cpu1 - cpu0) / (t1 - t0),
                batch=report.get("inference_batch", 0.0), p50_ms=p50, p99_ms=p99,
                threads={k: 1e6 * (v - threads0.get(k, 0.0)) / max(steps, 1) for k, v in threads1.items()})


HEADER = ("| workload | workers | envs/message | host CPU µs/env step | of which forward pass | env steps/s | host core use "
          "| mean batch | latency p50 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def format_row(r: dict) -> str:
    return (f"| {r['workload']} | {r['workers']} | {r['envs']} | {r['us_per_step']:.2f} | {r['forward_us_per_step']:.2f} "
            f"| {r['steps_per_s']:,.0f} | {r['core_use']:.2f} | {r['batch']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |")


def format_threads(r: dict) -> str:
    """The row's host CPU µs per env step by thread, largest first (those above 0.01)."""
    parts = [f"{name} {us:.2f}" for name, us in sorted(r["threads"].items(), key=lambda kv: -kv[1]) if us >= 0.01]
    return "  by thread (µs/env step): " + ", ".join(parts)


def _ints(text: Optional[str]) -> Optional[tuple[int, ...]]:
    return tuple(int(x) for x in text.split(",")) if text else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="cartpole,atari", help=f"comma-separated, of {','.join(GRID)}")
    parser.add_argument("--workers", help="comma-separated worker counts (default: the workload's grid)")
    parser.add_argument("--envs", help="comma-separated envs per message (default: the workload's grid)")
    parser.add_argument("--quick", action="store_true", help="a four-row grid per workload")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per row")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of stepping before the window")
    parser.add_argument("--network", choices=("preset", "tiny"), default="preset",
                        help="the workload preset's network, or an MLP with one layer of 8 (serving cost alone)")
    parser.add_argument("--procs", type=int, default=2, help="synthetic worker processes the workers are spread over")
    parser.add_argument("--worker-cpus", help="pin the worker processes to these CPUs, e.g. 1 or 1-15 (the host: taskset)")
    parser.add_argument("--threads", action="store_true", help="after each row, its host CPU by thread")
    parser.add_argument("--profile", help="profile the host during the window of the (single) row into this file: "
                        "NAME.pstats.txt: cProfile of the event loop and batcher threads in CPU time; any other name: "
                        "py-spy samples (wall-clock, GIL holder only) as collapsed stacks")
    parser.add_argument("--drive", help=argparse.SUPPRESS)  # child mode: the host's address
    parser.add_argument("--drive-workers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        _pin(args.worker_cpus)
        args.envs = int(args.envs)
        print(json.dumps(asyncio.run(_drive(args))), flush=True)
        return 0
    unknown = set(args.workloads.split(",")) - set(GRID)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}; choose from {sorted(GRID)}")
    if args.procs < 1:
        parser.error(f"--procs must be >= 1, got {args.procs}")
    if args.worker_cpus:
        try:
            unknown_cpus = cpu_list(args.worker_cpus) - set(range(os.cpu_count() or 1))
        except ValueError as error:
            parser.error(str(error))
        if unknown_cpus:
            parser.error(f"--worker-cpus names CPUs this machine does not have: {sorted(unknown_cpus)}")
    import jax

    print(f"host CPUs {sorted(os.sched_getaffinity(0))}, workers on {args.worker_cpus or 'any CPU'} in "
          f"{args.procs} processes, {jax.devices()[0].platform} JAX, {args.network} network, "
          f"{args.seconds:g} s windows\n\n{HEADER}", flush=True)
    for name in args.workloads.split(","):
        grid_workers, grid_envs = (QUICK if args.quick else GRID)[name]
        for num_envs in _ints(args.envs) or grid_envs:
            for workers in _ints(args.workers) or grid_workers:
                r = row(name, workers, num_envs, args.seconds, args.warmup, args.network, args.procs, args.worker_cpus,
                        args.profile)
                print(format_row(r) + ("\n" + format_threads(r) if args.threads else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
