"""Samples/s of the data-parallel learner on 1, 2 and 4 devices (seedleague.rl.sharding).

    python -m benchmarks.learner_scaling                                  # CartPole and Atari presets, 1/2/4 devices
    python -m benchmarks.learner_scaling --workloads atari --devices 1,4 --seconds 10

Each row runs in its own process. The "plain" row is an ordinary one-device JAX
process (`make_update`); the other rows run with --simulated-devices CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count) and time
`make_sharded_update` over a mesh of the first N of them, batch split N ways,
state replicated. The batch is placed on the mesh before timing, as the host's
replay places it, so this is the learner alone: forward, backward, gradient
all-reduce and one Adam step. samples/s counts the B x T rows an update trains on.

On a CPU machine the simulated devices share the same cores: the numbers show
what splitting the batch and all-reducing gradients cost, not a speed-up. Real
scaling needs real devices (GPUs/TPUs), where each has its own compute.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _measure(workload_name: str, devices: int, seconds: float, batch_size: int) -> dict:
    """In this process: time the sharded update over `devices` devices (0: plain make_update)."""
    import jax
    import numpy as np

    from benchmarks.learner_rate import synthetic_batch
    from benchmarks.workloads import WORKLOADS
    from seedleague.rl import sharding
    from seedleague.rl.device_config import DeviceConfig
    from seedleague.rl.learner import init_train_state, make_sharded_update, make_update

    workload = WORKLOADS[workload_name]
    host, network = workload.host(), workload.network()
    batch_size = batch_size or host.batch_size
    state = init_train_state(host.learner, network, jax.random.key(0))
    batch = synthetic_batch(workload, batch_size, host.unroll_length)
    if devices == 0:
        update = make_update(host.learner, network)
        batch = jax.device_put(batch)
    else:
        layout = sharding.make_layout(DeviceConfig(learner_devices=devices), batch_size)
        update = make_sharded_update(host.learner, network, layout.mesh)
        state = sharding.place_state(state, layout)
        batch = sharding.shard_batch(batch, layout.batch_sharding)
    for _ in range(2):  # compile, then one more
        state, metrics = update(state, batch)
    jax.block_until_ready(metrics)
    times = []
    end = time.perf_counter() + seconds
    while len(times) < 5 or time.perf_counter() < end:
        start = time.perf_counter()
        state, metrics = update(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    median = float(np.median(times))
    return dict(workload=workload.name, devices=devices, visible=jax.device_count(), batch=batch_size,
                unroll=host.unroll_length, updates_per_s=1 / median,
                samples_per_s=batch_size * host.unroll_length / median, updates=len(times))


def _run_child(workload: str, devices: int, simulated: int, seconds: float, batch_size: int) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={simulated}"
    command = [sys.executable, "-m", "benchmarks.learner_scaling", "--child", "--workloads", workload,
               "--devices", str(devices), "--seconds", str(seconds), "--batch-size", str(batch_size)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    lines = ["| workload | devices | batch x unroll | per device | updates/s | samples/s | vs plain |",
             "|---|---|---:|---:|---:|---:|---:|"]
    plain = {r["workload"]: r["samples_per_s"] for r in rows if r["devices"] == 0}
    for r in rows:
        where = "plain (1 device)" if r["devices"] == 0 else f"{r['devices']} of {r['visible']} simulated"
        per_device = r["batch"] // max(1, r["devices"])
        ratio = r["samples_per_s"] / plain[r["workload"]] if r["workload"] in plain else float("nan")
        lines.append(f"| {r['workload']} | {where} | {r['batch']} x {r['unroll']} | {per_device} "
                     f"| {r['updates_per_s']:,.1f} | {r['samples_per_s']:,.0f} | {ratio:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="cartpole,atari", help="comma-separated, of benchmarks.workloads")
    parser.add_argument("--devices", default="1,2,4", help="mesh sizes to time (each also gets the plain row)")
    parser.add_argument("--simulated-devices", type=int, default=4, help="CPU devices each sharded row's process sees")
    parser.add_argument("--seconds", type=float, default=5.0, help="timing window per row (at least 5 updates)")
    parser.add_argument("--batch-size", type=int, default=0, help="unrolls per update (0: the preset's)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_measure(args.workloads, int(args.devices), args.seconds, args.batch_size)), flush=True)
        return 0
    counts = [int(n) for n in args.devices.split(",")]
    if max(counts) > args.simulated_devices:
        parser.error(f"--devices {args.devices} needs --simulated-devices >= {max(counts)}")
    rows = []
    for workload in args.workloads.split(","):
        for devices in [0] + counts:
            rows.append(_run_child(workload, devices, args.simulated_devices, args.seconds, args.batch_size))
            print(f"  measured {workload} on {devices or 'plain'} device(s)", file=sys.stderr, flush=True)
    print(f"sharded learner update rate, CPU JAX ({os.cpu_count()} cores), median over {args.seconds:g} s per row\n")
    print(table(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
