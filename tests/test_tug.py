"""envs.tug_worker: the 2v2 team game (protocol v2 seat_team) and its evaluation against random seats."""

from __future__ import annotations

import numpy as np

from envs.tug_worker import CUES, SEAT_TEAM, TugGame, play_against_random
from seedleague.protocol.named import flat_model


def test_a_team_wins_by_pulling_on_its_cues_and_rewards_are_per_team_and_zero_sum():
    game = TugGame(2, seed=0)
    assert game.spec.seat_team == SEAT_TEAM and flat_model(game.spec)  # the flat model, with teams
    step = game.reset(seed=0)
    for turn in range(2):  # team 0 pulls on its cues, team 1 never does: +2 a step, won at the second
        cue = step.observation["observation"][:, :, 1:].argmax(-1)
        action = np.where(np.arange(4) < 2, cue, (cue + 1) % CUES)
        step = game.step({"action": action})
    assert step.terminated.all() and step.reward.tolist() == [[1.0, 1.0, -1.0, -1.0]] * 2
    assert (step.observation["observation"][:, :, 0] == 0).all()  # the next games start at the middle


def test_pulling_on_the_cue_beats_random_seats_and_random_does_not():
    wins, draws, losses = play_against_random(lambda o: o[:, 1:].argmax(1), 200)
    assert (wins, draws, losses) == (200, 0, 0)
    rng = np.random.default_rng(0)
    wins, _, losses = play_against_random(lambda o: rng.integers(CUES, size=len(o)), 200)
    assert wins < 140 and losses > 60
