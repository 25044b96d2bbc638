"""seedleague.games: env ids reach the built-in game families (envs/, registered as entry points) by their prefix."""

import sys

import pytest

import envs
from seedleague import games
from seedleague.protocol.named import NamedEnvSpec, flat_model


def test_an_env_id_goes_to_the_family_named_by_its_prefix_and_anything_else_to_gymnasium():
    assert games.family_of("openspiel:leduc_poker(players=2)") == (envs.OPENSPIEL, "leduc_poker(players=2)")
    assert games.family_of("pettingzoo:classic/tictactoe_v3") == (envs.PETTINGZOO, "classic/tictactoe_v3")
    assert games.family_of("CartPole-v1") == (envs.GYM, "CartPole-v1")
    assert games.family_of("ALE/Pong-v5") == (envs.GYM, "ALE/Pong-v5")
    assert games.family_of("my_module:MyEnv-v0") == (envs.GYM, "my_module:MyEnv-v0")  # gymnasium's module:id form
    assert games.family_of("gym:CartPole-v1") == (envs.GYM, "gym:CartPole-v1")  # the default family has no prefix


def test_each_family_starts_its_own_worker():
    assert games.worker_command("openspiel:kuhn_poker", 64) == (
        sys.executable, "-m", "envs.openspiel_worker", "--game", "kuhn_poker", "--num-envs", "64")
    assert games.worker_command("pettingzoo:pong_v3", 2)[2:4] == ("envs.pettingzoo_worker", "--game")
    assert games.worker_command("CartPole-v1", 8) == (
        sys.executable, "-m", "envs.gym_worker", "--env", "CartPole-v1", "--num-envs", "8")


def test_specs_are_read_here_where_they_can_be_and_bad_names_are_refused_with_the_workers_reason():
    spec = games.spec_of("CartPole-v1")  # a v1 worker's, named as the host reads its handshake
    (tensor,), (head,) = spec.observation.tensors, spec.action.heads
    assert (spec.env_name, tensor.shape, head.num_actions, flat_model(spec)) == ("CartPole-v1", (4,), 2, True)
    assert isinstance(games.spec_of("Pendulum-v1"), NamedEnvSpec)  # a v2 worker's (a continuous action)
    assert games.spec_of("NoSuchEnv-v0") is None  # the gym worker says why, when it starts
    assert games.spec_of("pettingzoo:pong_v3") is None  # an Atari ROM is checked by its worker
    tictactoe = games.spec_of("pettingzoo:classic/tictactoe_v3")
    assert tictactoe.num_seats == 2 and tictactoe.action.heads[0].has_legal_mask  # v1's legal mask, on its one head
    with pytest.raises(games.UnsupportedGame, match="the PettingZoo worker runs the families atari, classic, mpe"):
        games.spec_of("pettingzoo:nope/game")
    with pytest.raises(games.UnsupportedGame, match="OpenSpiel has no game 'nope'"):
        games.spec_of("openspiel:nope")


def test_without_installed_families_the_one_line_says_how_to_install_them(monkeypatch):
    monkeypatch.setattr(games, "families", lambda: {})
    with pytest.raises(games.UnsupportedGame, match=r"no built-in 'gym' game family is installed .*pip install -e \."):
        games.worker_command("CartPole-v1", 4)
