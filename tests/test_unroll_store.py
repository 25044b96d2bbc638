"""UnrollStore: rows, rewards written back, overlap of one row, turn-based reward accumulation."""

import numpy as np

from seedleague.host.unroll_store import UnrollStore


def store(num_agents, length=2, core=()):
    return UnrollStore(num_agents, length, (1,), np.float32, 2, core)


def step(s, t, acting=None, reward=None, terminated=None, first=None, core=()):
    n = len(s._cursor)
    return s.add(
        acting=np.ones(n, bool) if acting is None else np.asarray(acting),
        reward=np.zeros(n, np.float32) if reward is None else np.asarray(reward, np.float32),
        terminated=np.zeros(n, bool) if terminated is None else np.asarray(terminated),
        truncated=np.zeros(n, bool),
        observation=np.full((n, 1), t, np.float32),
        first=np.zeros(n, bool) if first is None else np.asarray(first),
        action=np.full(n, t % 2, np.int32),
        logits=np.zeros((n, 2), np.float32),
        legal_mask=None,
        policy_version=t,
        core_state=core,
    )


def test_unroll_completes_at_row_T_and_overlaps_by_one_row():
    s = store(1, length=2)
    assert step(s, 0, first=[True]) is None
    assert step(s, 1, reward=[1.0]) is None
    out = step(s, 2, reward=[2.0], terminated=[True], first=[True])
    # rows 0..2: observations 0,1,2; reward after action t arrives with step t+1
    assert out.observation[0, :, 0].tolist() == [0, 1, 2]
    assert out.reward[0].tolist() == [1.0, 2.0, 0.0]
    assert out.terminated[0].tolist() == [False, True, False]
    assert out.first[0].tolist() == [True, False, True]
    assert out.policy_version[0].tolist() == [0, 1, 2]
    # the next unroll starts with the old bootstrap row
    assert step(s, 3, reward=[3.0]) is None
    out = step(s, 4, reward=[4.0])
    assert out.observation[0, :, 0].tolist() == [2, 3, 4]
    assert out.reward[0].tolist() == [3.0, 4.0, 0.0]
    assert out.first[0].tolist() == [True, False, False]


def test_non_acting_seat_accumulates_rewards_into_its_next_step():
    s = store(2, length=1)
    step(s, 0, acting=[True, False])
    step(s, 1, acting=[False, True], reward=[0.0, 5.0])  # seat 1 acts for the first time; its reward is dropped
    out = step(s, 2, acting=[True, False], reward=[1.0, 2.0])
    assert out.observation[:, :, 0].tolist() == [[0, 2]]  # only seat 0 completed
    assert out.reward[0].tolist() == [1.0, 0.0]
    out = step(s, 3, acting=[False, True], reward=[0.5, 3.0], terminated=[True, True])
    # seat 1 acted at t=1, then received 2.0 (t=2) and 3.0 with the episode end (t=3)
    assert out.observation[:, :, 0].tolist() == [[1, 3]]
    assert out.reward[0].tolist() == [5.0, 0.0]
    assert out.terminated[0].tolist() == [True, False]


def test_core_state_is_the_state_before_row_0():
    core = (np.zeros((1, 3), np.float32),)
    s = store(1, length=2, core=core)
    for t in range(3):
        out = step(s, t, core=(np.full((1, 3), t, np.float32),))
    assert out.core_state[0].tolist() == [[0, 0, 0]]
    step(s, 3, core=(np.full((1, 3), 3, np.float32),))
    out = step(s, 4, core=(np.full((1, 3), 4, np.float32),))
    assert out.core_state[0].tolist() == [[2, 2, 2]]  # row 0 of the second unroll was step 2


def test_nothing_leaves_before_an_unroll_is_complete():
    s = store(4, length=5)
    assert all(step(s, t) is None for t in range(5))


def test_episode_start_seen_while_waiting_marks_the_next_acting_row_first():
    s = store(2, length=1)
    step(s, 0, acting=[True, False], first=[True, True])
    step(s, 1, acting=[False, True])  # seat 1's first move of episode 1: first (seen at t=0)
    out = step(s, 2, acting=[True, False], terminated=[True, True], first=[True, True])  # episode 2 starts
    assert out.first[0].tolist() == [True, True]  # seat 0: t=0 and t=2 both start episodes
    out = step(s, 3, acting=[False, True])  # seat 1 moves in episode 2, having seen its start at t=2 while waiting
    assert out.first[0].tolist() == [True, True]
    assert out.terminated[0].tolist() == [True, False]
