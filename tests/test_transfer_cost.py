"""benchmarks/transfer_cost.py: the batch it copies is a league batch's shape, and every way of copying it runs."""

import numpy as np

from benchmarks import transfer_cost


def test_the_league_batch_has_learner_and_opponent_rows():
    slots, learner, table = transfer_cost.league_batch(rows=8, opponents=2, observation_size=3, actions=4)
    np.testing.assert_array_equal(slots, [0, 1])
    assert [x.shape for x in learner] == [(8, 3), (8,), (8, 4)]
    assert [x.shape for x in table] == [(2, 4, 3), (2, 4), (2, 4, 4)]


def test_every_way_of_copying_is_timed():
    timings = transfer_cost.measure(rows=8, calls=2)
    assert set(timings) == {"device_put(tree)", "device_put per leaf", "jnp.asarray per leaf",
                            "device_put(tree), then a jitted sum", "numpy into the jitted sum"}
    assert all(us > 0 for us in timings.values())


def test_a_forward_pass_is_timed_with_and_without_packing(capsys):
    timings = transfer_cost.measure_forward("kuhn", rows=4, calls=2)
    assert set(timings) == {"act, one copy per array", "act, packed"}
    assert all(us > 0 for us in timings.values())
    transfer_cost.main(["--calls", "2", "--forward", "cartpole:3"])
    assert "cartpole       3 rows  act, packed" in capsys.readouterr().out
