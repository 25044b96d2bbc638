"""Env workers: processes that step games and let a seedleague host choose the
actions over the env protocol (proto/seedleague/v1/env.proto).

`gym_worker` runs any gymnasium env id with Discrete actions; `atari` holds the
Atari preprocessing it applies to "ALE/..." ids. Workers never import jax.
"""
