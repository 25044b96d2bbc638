"""Env workers: processes that step games and let a seedleague host choose the
actions over the env protocol (proto/seedleague/v1/env.proto).

`gym_worker` runs any gymnasium env id with Discrete actions (`gym_vector` picks
its vector env: native, sync or async; `atari` holds the Atari preprocessing it
applies to "ALE/..." ids); `openspiel_worker` runs any
two-player zero-sum OpenSpiel game by name (encoded by `openspiel_games`);
`pettingzoo_worker` runs two-player PettingZoo Atari games (Pong) and, through
`pettingzoo_classic`, classic turn-based AEC games (tictactoe_v3, connect_four_v3); `worker_loop` is their shared
connect/reconnect/stop loop; `cpp/` is a native C++ worker. Workers never import jax.
"""
