"""One process of a two-process learner; tests/test_distributed.py starts two of these.

    python tests/distributed_checks.py --coordinator 127.0.0.1:PORT --process-id 0 --losses vtrace,ppo --out p0.npz

Each process joins with jax.distributed (2 simulated CPU devices each, so the
learner mesh has 4 devices over 2 processes), takes its half of a global batch,
makes the sharded updates through a Replay (its rows in, its shard out), and
writes its params after every update, so the test can compare the processes with
each other and with the single-device update on the whole batch.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from seedleague.host.replay import Replay  # noqa: E402
from seedleague.host.replay_config import ReplayConfig
from seedleague.rl import sharding  # noqa: E402
from seedleague.rl.device_config import DeviceConfig, DistributedConfig  # noqa: E402
from seedleague.rl.learner import init_train_state, make_sharded_update  # noqa: E402
from seedleague.rl.learner_config import LearnerConfig
from tests.test_learner import NETWORKS, _synthetic_batch  # noqa: E402

GLOBAL_BATCH, STEPS = 8, 3


def global_batches(network):
    """The batches of every update, whole (the test runs the single-device update on these)."""
    return [_synthetic_batch(network, batch=GLOBAL_BATCH, seed=seed) for seed in range(STEPS)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--losses", default="vtrace", help="comma-separated; each gets its own updates, in turn")
    parser.add_argument("--lstm-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="init seed; process 0's params win whatever it is")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sharding.initialize_distributed(DistributedConfig(args.coordinator, 2, args.process_id))
    local_rows = GLOBAL_BATCH // jax.process_count()
    layout = sharding.make_layout(DeviceConfig(), batch_size=local_rows)
    assert layout.multi_process and layout.num_learner_devices == 4, layout
    saved = {}
    for loss in args.losses.split(","):  # one joined pair of processes checks every loss: joining costs seconds
        saved.update(sharded_updates(LearnerConfig(loss=loss), NETWORKS[args.lstm_size], layout, args, f"{loss}/"))
    np.savez(args.out, **saved)
    print(f"process {jax.process_index()} of {jax.process_count()}: {STEPS} updates of {args.losses} on a "
          f"{layout.describe()}", flush=True)
    return 0


def sharded_updates(config, network, layout, args, prefix: str) -> dict:
    """STEPS sharded updates from a fresh state through a Replay (this process's rows in, its shard out): the
    params after each, its loss and the final step, as arrays named `prefix` + step{k}_leaf{i}, ..._loss, step."""
    local_rows = GLOBAL_BATCH // jax.process_count()
    state = sharding.place_state(init_train_state(config, network, jax.random.key(args.seed)), layout)
    update = make_sharded_update(config, network, layout.mesh)
    mine = slice(args.process_id * local_rows, (args.process_id + 1) * local_rows)
    batches = [jax.tree.map(lambda x: np.asarray(x)[mine], batch) for batch in global_batches(network)]
    replay = Replay(ReplayConfig(capacity=16), jax.tree.map(lambda x: x[:1], batches[0]), local_rows,
                    batch_sharding=layout.batch_sharding)
    saved = {}
    for step, rows in enumerate(batches):
        assert replay.insert(rows, timeout=10) == local_rows
        batch = replay.sample(timeout=10)
        assert batch.observation.shape[0] == GLOBAL_BATCH
        state, metrics = update(state, batch)
        for i, leaf in enumerate(jax.tree.leaves(state.params)):
            saved[f"{prefix}step{step}_leaf{i}"] = np.asarray(sharding.local_value(leaf))
        saved[f"{prefix}step{step}_loss"] = np.asarray(sharding.local_value(metrics["total_loss"]))
    saved[f"{prefix}step"] = np.asarray(sharding.local_value(state.step))
    return saved


if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")  # read when JAX starts, below
    sys.exit(main())
