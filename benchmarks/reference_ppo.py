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

`--env ALE/Pong-v5` runs the zoo's Atari PPO (8 envs, 128-step rollouts, minibatches of 256,
4 epochs, lr 2.5e-4 and clip 0.1 annealed linearly over `--max-steps`, entropy 0.01, the
Nature CNN) on sb3's Atari wrappers (no-op starts, 4-frame skip with max-pooling, 84x84
grey, 4 frames stacked, rewards clipped for training) over ALE's v5 env with its own frame
skip off and its sticky actions on, as `envs.atari` does for seedleague. It has no target:
it trains for `--max-seconds` and appends a learning-curve point to `--curve` (JSON lines:
wall seconds since training began, agent steps, frames = 4 x agent steps, episodes, the
mean game score of the last 100 episodes) every `--curve-every` seconds, for the issue 18
Pong comparison with `seedleague train --env ALE/Pong-v5`. It needs ale-py and
opencv-python-headless in the same virtualenv; torch uses `--threads` threads (default 2,
the cores seedleague's run gets).
"""

from __future__ import annotations

import argparse
import json
import time

TARGET = 475.0
EPISODES = 100
PENDULUM_TARGET = -250.0
ATARI = "ALE/Pong-v5"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=100_000, help="the zoo's budget (the anneals span it)")
    parser.add_argument("--env", default="CartPole-v1", choices=("CartPole-v1", "Pendulum-v1", ATARI))
    parser.add_argument("--max-seconds", type=float, default=0.0, help="stop training after this long (0: no limit)")
    parser.add_argument("--curve", default="", help="append learning-curve points here (JSON lines)")
    parser.add_argument("--curve-every", type=float, default=10.0, help="seconds between learning-curve points")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: 1, or 2 for Atari)")
    args = parser.parse_args()
    target = {"Pendulum-v1": PENDULUM_TARGET, ATARI: float("inf")}.get(args.env, TARGET)
    try:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError as error:
        raise SystemExit(f"{error}: run this with a virtualenv that has stable-baselines3 (see the docstring)")
    torch.set_num_threads(args.threads or (2 if args.env == ATARI else 1))
    curve = open(args.curve, "a") if args.curve else None

    class StopAtTarget(BaseCallback):
        def __init__(self):
            super().__init__()
            self.reached_at = None
            self.next_point = 0.0  # seconds of training at which the next curve point is due
            self.episodes = 0

        def _on_step(self) -> bool:
            self.episodes += sum("episode" in info for info in self.locals.get("infos", ()))
            if curve and time.perf_counter() - start >= self.next_point:
                self.write_point()
            returns = [info["r"] for info in self.model.ep_info_buffer]
            if len(returns) >= EPISODES and sum(returns) / len(returns) >= target:
                self.reached_at = self.num_timesteps
                return False
            return not (args.max_seconds and time.perf_counter() - start > args.max_seconds)

        def write_point(self) -> None:
            wall = time.perf_counter() - start
            returns = [info["r"] for info in self.model.ep_info_buffer]
            point = dict(wall_s=round(wall, 1), env_steps=self.num_timesteps, frames=4 * self.num_timesteps,
                         episodes=self.episodes,
                         mean_return=round(sum(returns) / len(returns), 2) if returns else None)
            curve.write(json.dumps(point) + "\n")
            curve.flush()
            self.next_point = wall + args.curve_every

    linear = lambda value: (lambda remaining: remaining * value)
    if args.env == ATARI:
        import ale_py
        import gymnasium
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        gymnasium.register_envs(ale_py)
        env = VecFrameStack(make_atari_env(ATARI, n_envs=8, seed=args.seed, env_kwargs=dict(frameskip=1)), n_stack=4)
        model = PPO("CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=linear(2.5e-4),
                    clip_range=linear(0.1), vf_coef=0.5, ent_coef=0.01, seed=args.seed, device="cpu", verbose=0)
    elif args.env == "Pendulum-v1":
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
    if curve:
        callback.write_point()
    returns = [info["r"] for info in model.ep_info_buffer]
    print(json.dumps(dict(seed=args.seed, env_steps=callback.reached_at or model.num_timesteps,
                          reached=callback.reached_at is not None, train_s=round(time.perf_counter() - start, 2),
                          mean_return=round(sum(returns) / max(len(returns), 1), 1))), flush=True)


if __name__ == "__main__":
    main()
