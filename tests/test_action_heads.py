"""Action heads: log-probabilities and entropies by hand, and the squashed and clipped laws checked numerically."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedleague.rl.action_heads import (ActionHeads, Categorical, ClippedGaussian, SquashedGaussian,
                                        log_one_minus_tanh_squared, sample_legal)
from seedleague.rl.named_spec import ActionSpec, ContinuousHead, DiscreteHead

MAYBE_JIT = pytest.mark.parametrize("maybe_jit", [lambda f: f, jax.jit], ids=["eager", "jit"])
MOVE = DiscreteHead("move", 4, has_legal_mask=True)
MASK = np.array([True, False, True, False])
# Box [-1, 3]: centre 1, half-width 2.
AIM = ContinuousHead("aim", low=(-1.0,), high=(3.0,))


def _log_normal(x, mean, std):
    return -0.5 * ((x - mean) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)


def _normal_cdf(x):
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _gaussian_params(mean, std):
    """A Gaussian head's params [2d]: mean, then log_std."""
    return np.concatenate([np.atleast_1d(mean), np.log(np.atleast_1d(std))]).astype(np.float32)


@MAYBE_JIT
def test_categorical_head_by_hand(maybe_jit):
    head = Categorical(MOVE)
    logits = np.array([math.log(3.0), 9.0, 0.0, 9.0], np.float32)  # legal probabilities 3/4 and 1/4
    log_pi = maybe_jit(head.log_prob)(logits, np.array(2), MASK)
    entropy = maybe_jit(head.entropy)(logits, MASK)
    np.testing.assert_allclose(log_pi, math.log(0.25), rtol=1e-6)
    np.testing.assert_allclose(entropy, -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), rtol=1e-6)
    assert int(maybe_jit(head.mode)(logits, MASK)) == 0
    samples = np.asarray(maybe_jit(head.sample)(np.tile(logits, (4000, 1)), np.tile(MASK, (4000, 1)),
                                                jax.random.key(0)))
    assert set(np.unique(samples)) == {0, 2}
    assert abs(np.mean(samples == 0) - 0.75) < 0.03


@MAYBE_JIT
def test_sample_legal_never_draws_an_illegal_action(maybe_jit):
    # Row 0: the illegal actions 0 and 2 have the largest logits; legal 1 and 3 have equal ones, so 1/2 each.
    # Row 1: one legal action, far below the illegal ones: always it.
    logits = np.array([[10.0, 0.0, 20.0, 0.0], [30.0, 30.0, -50.0, 30.0]], np.float32)
    legal = np.array([[False, True, False, True], [False, False, True, False]])
    samples = np.asarray(maybe_jit(sample_legal)(np.tile(logits, (2000, 1, 1)), np.tile(legal, (2000, 1, 1)),
                                                 jax.random.key(1)))
    assert samples.dtype == np.int32 and samples.shape == (2000, 2)
    assert set(np.unique(samples[:, 0])) == {1, 3}
    assert abs(np.mean(samples[:, 0] == 1) - 0.5) < 0.05
    assert set(np.unique(samples[:, 1])) == {2}


@MAYBE_JIT
def test_sample_legal_greedy_takes_the_legal_argmax(maybe_jit):
    greedy = maybe_jit(functools.partial(sample_legal, greedy=True))
    legal = np.array([False, True, True, True])
    assert int(greedy(np.array([5.0, 1.0, 3.0, 2.0], np.float32), legal, None)) == 2  # 5.0 is illegal
    assert int(greedy(np.array([5.0, 1.0, 3.0, 3.0], np.float32), legal, None)) == 2  # a tie: the lower index


def test_every_discrete_sampler_draws_what_sample_legal_draws():
    """The categorical head and its mode are sample_legal, key for key; and sample_legal keeps the stream the
    host's v1 pass drew before it was the one function (categorical over logits with illegal ones at the
    dtype's minimum), so a seeded run acts as it did."""
    head = Categorical(MOVE)
    logits = np.asarray(jax.random.normal(jax.random.key(7), (64, 4)), np.float32)
    legal = np.asarray(jax.random.bernoulli(jax.random.key(8), 0.6, (64, 4))) | (np.arange(4) == 3)
    for seed in range(5):
        key = jax.random.key(seed)
        drawn = np.asarray(sample_legal(logits, legal, key))
        np.testing.assert_array_equal(np.asarray(head.sample(logits, legal, key)), drawn)
        before = jax.random.categorical(key, np.where(legal, logits, np.finfo(np.float32).min))
        np.testing.assert_array_equal(drawn, np.asarray(before))
        assert legal[np.arange(64), drawn].all()
    np.testing.assert_array_equal(np.asarray(head.mode(logits, legal)),
                                  np.asarray(sample_legal(logits, legal, None, greedy=True)))


@MAYBE_JIT
def test_squashed_gaussian_head_by_hand(maybe_jit):
    head = SquashedGaussian(AIM)
    params = _gaussian_params(0.5, 0.5)
    # a = centre + half * tanh(u) with u = 0.3:
    # log p(a) = log N(0.3; 0.5, 0.5) - log 2 - log(1 - tanh(0.3)^2)
    action = np.array([1.0 + 2.0 * math.tanh(0.3)], np.float32)
    expected = _log_normal(0.3, 0.5, 0.5) - math.log(2.0) - math.log(1.0 - math.tanh(0.3) ** 2)
    np.testing.assert_allclose(maybe_jit(head.log_prob)(params, action), expected, rtol=1e-5)
    # Entropy used: the Gaussian's, 0.5 log(2 pi e) + log 0.5, plus log half = log 2.
    np.testing.assert_allclose(maybe_jit(head.entropy)(params), 0.5 * math.log(2 * math.pi * math.e), rtol=1e-6)
    np.testing.assert_allclose(maybe_jit(head.mode)(params), [1.0 + 2.0 * math.tanh(0.5)], rtol=1e-6)


@MAYBE_JIT
def test_clipped_gaussian_head_by_hand(maybe_jit):
    head = ClippedGaussian(AIM)
    params = _gaussian_params(0.1, 0.25)  # in action units: mean 1 + 2 * 0.1 = 1.2, std 2 * 0.25 = 0.5
    log_prob = maybe_jit(head.log_prob)
    np.testing.assert_allclose(log_prob(params, np.array([2.0], np.float32)), _log_normal(2.0, 1.2, 0.5),
                               rtol=1e-5)
    # At a bound the clipped law has a point mass: P(x >= 3) and P(x <= -1).
    np.testing.assert_allclose(log_prob(params, np.array([3.0], np.float32)),
                               math.log(1.0 - _normal_cdf((3.0 - 1.2) / 0.5)), rtol=1e-5)
    np.testing.assert_allclose(log_prob(params, np.array([-1.0], np.float32)),
                               math.log(_normal_cdf((-1.0 - 1.2) / 0.5)), rtol=1e-4)
    np.testing.assert_allclose(maybe_jit(head.entropy)(params), 0.5 * math.log(2 * math.pi * math.e * 0.25),
                               rtol=1e-6)


@MAYBE_JIT
def test_composite_action_sums_its_heads(maybe_jit):
    spec = ActionSpec((MOVE, ContinuousHead("aim", low=(-1.0, 0.0), high=(3.0, 1.0))))
    heads = ActionHeads(spec, continuous="squashed")
    params = {"move": np.array([math.log(3.0), 9.0, 0.0, 9.0], np.float32),
              "aim": _gaussian_params([0.5, -0.2], [0.5, 2.0])}
    action = {"move": np.array(0), "aim": np.array([1.0 + 2.0 * math.tanh(0.3), 0.5 + 0.5 * math.tanh(-1.0)],
                                                   np.float32)}
    legal = {"move": MASK}
    expected_log_pi = (math.log(0.75)
                       + _log_normal(0.3, 0.5, 0.5) - math.log(2.0) - math.log(1 - math.tanh(0.3) ** 2)
                       + _log_normal(-1.0, -0.2, 2.0) - math.log(0.5) - math.log(1 - math.tanh(-1.0) ** 2))
    expected_entropy = (-(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
                        + 0.5 * math.log(2 * math.pi * math.e * 0.25) + math.log(2.0)
                        + 0.5 * math.log(2 * math.pi * math.e * 4.0) + math.log(0.5))
    np.testing.assert_allclose(maybe_jit(heads.log_prob)(params, action, legal), expected_log_pi, rtol=1e-5)
    np.testing.assert_allclose(maybe_jit(heads.entropy)(params, legal), expected_entropy, rtol=1e-5)
    np.testing.assert_allclose(maybe_jit(heads.kl)(params, params, legal), 0.0, atol=1e-6)
    sample = maybe_jit(heads.sample)(params, legal, jax.random.key(3))
    assert sample["move"].dtype == jnp.int32 and MASK[int(sample["move"])]
    aim = np.asarray(sample["aim"])
    assert aim.shape == (2,) and np.all((aim >= [-1, 0]) & (aim <= [3, 1]))


SQUASH_PARAMS = _gaussian_params(0.7, 0.8)  # u ~ N(0.7, 0.8^2) squashed onto [-1, 3]


def _rows(params, n):
    """The same head params for n rows [n, P]."""
    return np.tile(params, (n, 1))


def _density(head, params, actions):
    """exp(log p(a)) for each action in a 1-D float array, by one jitted call."""
    actions = np.asarray(actions, np.float32)[:, None]
    return np.exp(np.asarray(jax.jit(head.log_prob)(_rows(params, len(actions)), actions), np.float64))


def _samples(head, params, n, seed):
    return np.asarray(jax.jit(head.sample)(_rows(params, n), None, jax.random.key(seed)))[:, 0]


def _squashed_cdf(a, mean=0.7, std=0.8):
    """P(A <= a) = Phi((atanh((a - centre) / half) - mean) / std), in float64."""
    return np.array([_normal_cdf((math.atanh((x - 1.0) / 2.0) - mean) / std) for x in np.atleast_1d(a)])


def test_squashed_density_integrates_to_one_over_the_box():
    head = SquashedGaussian(AIM)
    edges = np.linspace(-1.0, 3.0, 200_001)
    mids = ((edges[:-1] + edges[1:]) / 2).astype(np.float32)
    density = _density(head, SQUASH_PARAMS, mids)
    np.testing.assert_allclose(np.sum(density * np.diff(edges)), 1.0, atol=1e-4)


def test_squashed_density_is_the_derivative_of_its_cdf():
    head = SquashedGaussian(AIM)
    points = np.array([-0.9, -0.3, 0.5, 1.0, 1.7, 2.4, 2.95])
    h = 1e-4
    finite_difference = (_squashed_cdf(points + h) - _squashed_cdf(points - h)) / (2 * h)
    density = _density(head, SQUASH_PARAMS, points)
    np.testing.assert_allclose(density, finite_difference, rtol=2e-3)


def test_squashed_samples_follow_the_density():
    head = SquashedGaussian(AIM)
    n = 200_000
    samples = _samples(head, SQUASH_PARAMS, n, seed=0)
    assert samples.min() >= -1.0 and samples.max() <= 3.0
    edges = np.linspace(-1.0, 3.0, 21)
    counts, _ = np.histogram(samples, edges)
    expected = np.diff(_squashed_cdf(np.clip(edges, -1 + 1e-12, 3 - 1e-12)))
    # Each bin's count is binomial: within 4 standard deviations of n * p.
    assert np.all(np.abs(counts - n * expected) <= 4 * np.sqrt(n * expected * (1 - expected)) + 1)


def test_squashed_entropy_bounds_the_true_entropy_and_meets_it_for_a_narrow_head():
    head = SquashedGaussian(AIM)
    edges = np.linspace(-1.0, 3.0, 400_001)
    mids = ((edges[:-1] + edges[1:]) / 2).astype(np.float32)
    for params, gap in ((SQUASH_PARAMS, None), (_gaussian_params(0.0, 0.01), 1e-3)):
        density = _density(head, params, mids)
        numeric = -np.sum(density * np.log(np.maximum(density, 1e-300)) * np.diff(edges))
        used = float(head.entropy(params))
        assert numeric <= used
        if gap is not None:
            assert used - numeric < gap


def test_squashed_log_prob_and_gradient_are_finite_at_the_bounds():
    head = SquashedGaussian(AIM)
    for action in (-1.0, 3.0):
        value, grad = jax.value_and_grad(head.log_prob)(SQUASH_PARAMS, np.array([action], np.float32))
        assert np.isfinite(value) and np.all(np.isfinite(grad))
    assert np.isfinite(log_one_minus_tanh_squared(jnp.float32(50.0)))
    np.testing.assert_allclose(log_one_minus_tanh_squared(jnp.float32(0.3)), math.log(1 - math.tanh(0.3) ** 2),
                               rtol=1e-5)


def test_clipped_law_has_its_point_masses_where_the_samples_are():
    head = ClippedGaussian(AIM)
    params = _gaussian_params(0.6, 0.5)  # in action units N(2.2, 1): a fifth of the mass beyond 3
    n = 100_000
    samples = _samples(head, params, n, seed=1)
    mass_high = math.exp(float(head.log_prob(params, np.array([3.0], np.float32))))
    mass_low = math.exp(float(head.log_prob(params, np.array([-1.0], np.float32))))
    assert abs(np.mean(samples == 3.0) - mass_high) < 4 * math.sqrt(mass_high / n)
    assert abs(np.mean(samples == -1.0) - mass_low) < 4 * math.sqrt(mass_low / n) + 1e-4
    edges = np.linspace(-1.0, 3.0, 100_001)
    mids = ((edges[:-1] + edges[1:]) / 2).astype(np.float32)
    density = _density(head, params, mids)
    np.testing.assert_allclose(np.sum(density * np.diff(edges)) + mass_low + mass_high, 1.0, atol=1e-4)


def test_gaussian_kl_is_zero_for_equal_heads_and_positive_otherwise():
    heads = ActionHeads(ActionSpec((AIM,)), continuous="clipped")
    p, q = {"aim": _gaussian_params(0.1, 0.5)}, {"aim": _gaussian_params(0.3, 0.4)}
    np.testing.assert_allclose(heads.kl(p, p), 0.0, atol=1e-7)
    # KL(N(0.1, 0.5^2) || N(0.3, 0.4^2)) in Box units (the clipped head's KL is the Gaussians').
    expected = math.log(0.4 / 0.5) + (0.25 + 0.04) / (2 * 0.16) - 0.5
    np.testing.assert_allclose(heads.kl(p, q), expected, rtol=1e-5)


def test_bad_head_settings_say_what_to_change():
    with pytest.raises(ValueError, match="continuous must be one of"):
        ActionHeads(ActionSpec((AIM,)), continuous="beta")
    with pytest.raises(ValueError, match=r"needs \[\.\.\., 2\] params"):
        SquashedGaussian(AIM).log_prob(np.zeros(3, np.float32), np.zeros(1, np.float32))
