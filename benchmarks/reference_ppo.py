"""A well-known library's PPO on CartPole-v1 (and Pendulum-v1), for the "env steps to solve" comparison.

Runs stable-baselines3's PPO with the rl-baselines3-zoo hyperparameters for CartPole-v1
(8 envs, 32-step rollouts, one minibatch of 256, 20 epochs, lr 1e-3 and clip 0.2 both
annealed linearly to 0 over 100K steps, gamma 0.98, GAE lambda 0.8, no entropy bonus)
until the mean return of the last 100 episodes reaches 475, the same stop as
`seedleague train --env CartPole-v1`. It is not a dependency: install it in a virtualenv
of its own and run this file with that interpreter, from the repository root:

    python3 -m venv /tmp/sb3venv && /tmp/sb3venv/bin/pip install stable-baselines3
    /usr/bin/time -f "%e s" /tmp/sb3venv/bin/python benchmarks/reference_ppo.py --seed 0

It prints one JSON line: seed, env steps when the target was reached (checked after
every vector step, so exact to 8 env steps), training seconds and the mean return.

`--env Pendulum-v1` runs the zoo's Pendulum-v1 PPO instead (4 envs, 1024-step rollouts,
minibatches of 64, 10 epochs, lr 1e-3, gamma 0.9, GAE lambda 0.95, clip 0.2, gSDE
resampled every 4 steps) until the mean return of the last 100 episodes reaches -250 or
`--max-seconds` of training pass, the stop of the issue 17 comparison with
`seedleague train --env Pendulum-v1`.
"""

from __future__ import annotations

import argparse
import json
import time

TARGET = 475.0
EPISODES = 100
PENDULUM_TARGET = -250.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=100_000, help="the zoo's budget (the anneals span it)")
    parser.add_argument("--env", default="CartPole-v1", choices=("CartPole-v1", "Pendulum-v1"))
    parser.add_argument("--max-seconds", type=float, default=0.0, help="stop training after this long (0: no limit)")
    args = parser.parse_args()
    target = PENDULUM_TARGET if args.env == "Pendulum-v1" else TARGET
    try:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError as error:
        raise SystemExit(f"{error}: run this with a virtualenv that has stable-baselines3 (see the docstring)")
    torch.set_num_threads(1)

    class StopAtTarget(BaseCallback):
        def __init__(self):
            super().__init__()
            self.reached_at = None

        def _on_step(self) -> bool:
            returns = [info["r"] for info in self.model.ep_info_buffer]
            if len(returns) >= EPISODES and sum(returns) / len(returns) >= target:
                self.reached_at = self.num_timesteps
                return False
            return not (args.max_seconds and time.perf_counter() - start > args.max_seconds)

    linear = lambda value: (lambda remaining: remaining * value)
    if args.env == "Pendulum-v1":
        env = make_vec_env("Pendulum-v1", n_envs=4, seed=args.seed)
        model = PPO("MlpPolicy", env, n_steps=1024, batch_size=64, gae_lambda=0.95, gamma=0.9, n_epochs=10,
                    ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4,
                    seed=args.seed, device="cpu", verbose=0)
    else:
        env = make_vec_env("CartPole-v1", n_envs=8, seed=args.seed)
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                    ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=args.seed, device="cpu",
                    verbose=0)
    callback = StopAtTarget()
    start = time.perf_counter()
    model.learn(total_timesteps=args.max_steps, callback=callback)
    returns = [info["r"] for info in model.ep_info_buffer]
    print(json.dumps(dict(seed=args.seed, env_steps=callback.reached_at or model.num_timesteps,
                          reached=callback.reached_at is not None, train_s=round(time.perf_counter() - start, 2),
                          mean_return=round(sum(returns) / max(len(returns), 1), 1))), flush=True)


if __name__ == "__main__":
    main()
