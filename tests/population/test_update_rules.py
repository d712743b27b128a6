"""The update rules of ClipUp, PGPE, SNES and XNES against their formulas, on tiny cases computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th

from lit_sb3.population import ES, PGPE, SNES, XNES, ClipUp
from lit_sb3.population.ranking import centered_ranks, nes_utilities, shape_returns
from population.helpers import make_model

# ------------------------------------------------------------------------------------------------------ ClipUp


def clipup_steps(optimizer: ClipUp, parameters: list[th.Tensor], ascent: list[float], n_steps: int) -> list[list]:
    """Step ``n_steps`` times up the same ascent direction; return the parameters after each step."""
    history = []
    for _ in range(n_steps):
        for parameter, value in zip(parameters, ascent, strict=True):
            parameter.grad = th.tensor([-value])  # torch optimisers minimise
        optimizer.step()
        history.append([float(parameter) for parameter in parameters])
    return history


def test_clipup_normalises_the_gradient_accumulates_momentum_and_clips_the_speed():
    # Two parameters, one group: the norm is that of the flat vector (3, 4), of length 5.
    parameters = [th.zeros(1), th.zeros(1)]
    optimizer = ClipUp(parameters, lr=0.1, momentum=0.5, max_speed=0.15)
    history = clipup_steps(optimizer, parameters, [300.0, 400.0], 3)
    unit = np.array([0.6, 0.8])
    # v1 = 0.1 * g / |g| = (0.06, 0.08): speed 0.1, not clipped
    np.testing.assert_allclose(history[0], 0.1 * unit, rtol=1e-6)
    # v2 = 0.5 * v1 + 0.1 * unit = 0.15 * unit: speed 0.15, exactly the bound
    np.testing.assert_allclose(history[1], 0.25 * unit, rtol=1e-6)
    # v3 = 0.5 * v2 + 0.1 * unit = 0.175 * unit, clipped to the speed 0.15
    np.testing.assert_allclose(history[2], 0.40 * unit, rtol=1e-6)
    assert optimizer.speed() == pytest.approx(0.15)
    # A zero gradient adds no step: the velocity decays by the momentum.
    clipup_steps(optimizer, parameters, [0.0, 0.0], 1)
    np.testing.assert_allclose([float(parameter) for parameter in parameters], 0.475 * unit, rtol=1e-6)


def test_clipup_steps_do_not_depend_on_the_gradient_scale_and_default_to_twice_lr_as_max_speed():
    small, large = th.zeros(1), th.zeros(1)
    for parameter, scale in ((small, 1e-6), (large, 1e6)):
        optimizer = ClipUp([parameter], lr=0.3, momentum=0.9)
        assert optimizer.param_groups[0]["max_speed"] is None
        history = clipup_steps(optimizer, [parameter], [scale], 4)
        # 0.3, then 0.3 * 0.9 + 0.3 = 0.57, then min(0.6, ...) = 0.6: the default max_speed is 2 * lr
        np.testing.assert_allclose(np.diff([0.0] + [step[0] for step in history]), [0.3, 0.57, 0.6, 0.6], rtol=1e-6)


def test_clipup_weight_decay_joins_the_gradient_before_it_is_normalised():
    parameter = th.tensor([1.0])
    optimizer = ClipUp([parameter], lr=0.1, momentum=0.0, weight_decay=2.0)
    parameter.grad = th.tensor([-1.0])  # with the decay, the gradient is -1 + 2 * 1 = 1: a step down
    optimizer.step()
    assert float(parameter) == pytest.approx(0.9)


# ----------------------------------------------------------------------------------------------------- rankings


def test_nes_utilities_are_the_papers_with_ties_sharing_their_mean():
    n = 4
    weights = [max(0.0, math.log(n / 2 + 1) - math.log(k)) for k in range(1, n + 1)]
    by_rank = [weight / sum(weights) - 1 / n for weight in weights]  # best first
    expected = [by_rank[3], by_rank[0], by_rank[2], by_rank[1]]
    np.testing.assert_allclose(nes_utilities(np.array([1.0, 7.0, 3.0, 5.0])), expected)
    tied = nes_utilities(np.array([7.0, 7.0, 1.0, 2.0]))
    np.testing.assert_allclose(tied, [(by_rank[0] + by_rank[1]) / 2] * 2 + [by_rank[3], by_rank[2]])
    assert abs(tied.sum()) < 1e-12


def test_the_other_shapings():
    returns = np.array([2.0, -1.0, 5.0])
    np.testing.assert_allclose(shape_returns(returns, "centered"), centered_ranks(returns))
    np.testing.assert_allclose(shape_returns(returns, "linear"), [0.5, 0.0, 1.0])
    np.testing.assert_allclose(shape_returns(returns, "normalized"), [0.0, -1.0, 1.0])  # sample std 3, as EvoTorch
    np.testing.assert_array_equal(shape_returns(returns, "raw"), returns)
    np.testing.assert_array_equal(shape_returns(np.ones(3), "normalized"), np.zeros(3))


# ------------------------------------------------------------------------------------------------------- PGPE


def test_pgpe_steps_along_its_gradients_and_bounds_the_stdev_change():
    stdev_init = np.linspace(0.05, 0.4, 8)
    model = make_model(
        PGPE,
        popsize=4,
        zero_policy=False,
        optimizer="sgd",  # centre <- centre + lr * gradient: the gradient itself shows
        center_learning_rate=1.0,
        stdev_init=stdev_init,
        stdev_learning_rate=1.0,
        stdev_max_change=0.2,
    )
    centre = model.policy.parameters_to_vector().astype(np.float64)
    candidates = model.ask().astype(np.float64)
    np.testing.assert_allclose(candidates[0] + candidates[1], 2 * centre, atol=1e-6)  # antithetic pairs
    np.testing.assert_allclose(candidates[2] + candidates[3], 2 * centre, atol=1e-6)
    s1, s2 = candidates[0] - centre, candidates[2] - centre
    # Returns 4, 3 | 1, 2: centred ranks 1/2, 1/6 | -1/2, -1/6 (mean 0).
    model.tell(np.array([4.0, 3.0, 1.0, 2.0]))
    u1_plus, u1_minus, u2_plus, u2_minus = 0.5, 1 / 6, -0.5, -1 / 6
    centre_gradient = ((u1_plus - u1_minus) / 2 * s1 + (u2_plus - u2_minus) / 2 * s2) / 2
    np.testing.assert_allclose(model.policy.parameters_to_vector(), centre + centre_gradient, atol=1e-6)
    sigma = stdev_init
    stdev_gradient = (
        (u1_plus + u1_minus) / 2 * (s1**2 - sigma**2) / sigma + (u2_plus + u2_minus) / 2 * (s2**2 - sigma**2) / sigma
    ) / 2
    unbounded = sigma + 1.0 * stdev_gradient
    expected = np.clip(unbounded, 0.8 * sigma, 1.2 * sigma)
    np.testing.assert_allclose(model.stdev, expected, rtol=1e-5)
    clipped = ~np.isclose(unbounded, expected)
    assert clipped.any() and not clipped.all()  # the case exercises the bound and the free update


def test_pgpe_stdev_without_a_bound_must_stay_positive():
    model = make_model(PGPE, popsize=4, stdev_max_change=None, stdev_learning_rate=1e6)
    candidates = model.ask()
    centre, stdev = model.policy.parameters_to_vector(), model.stdev.copy()
    returns = np.array([4.0, 3.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="reached zero or below: bound its change with stdev_max_change"):
        model.tell(returns)  # a huge step: some stdev goes below zero
    # Nothing of the update was applied: not the centre, not ClipUp's velocity.
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), centre)
    np.testing.assert_array_equal(model.stdev, stdev)
    assert model.optimizer.speed() == 0.0 and model._n_updates == 0
    model.stdev_learning_rate = 0.1  # the same round, told again with a smaller step, is one update
    model.tell(returns)
    reference = make_model(PGPE, popsize=4, stdev_max_change=None, stdev_learning_rate=0.1)
    np.testing.assert_array_equal(reference.ask(), candidates)
    reference.tell(returns)
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), reference.policy.parameters_to_vector())
    np.testing.assert_array_equal(model.stdev, reference.stdev)
    assert model._n_updates == reference._n_updates == 1


def test_pgpe_takes_pgpelib_and_evotorch_optimizer_settings():
    adam = make_model(PGPE, optimizer="adam", optimizer_config={"beta1": 0.5, "beta2": 0.9, "epsilon": 1e-6})
    assert isinstance(adam.optimizer, th.optim.Adam)
    assert adam.optimizer.param_groups[0]["betas"] == (0.5, 0.9) and adam.optimizer.param_groups[0]["eps"] == 1e-6
    clipup = make_model(PGPE, optimizer_config={"max_speed": 0.3, "momentum": 0.8}, center_learning_rate=0.1)
    assert (clipup.optimizer.param_groups[0]["max_speed"], clipup.optimizer.param_groups[0]["momentum"]) == (0.3, 0.8)
    sgd = make_model(PGPE, optimizer="SGD", momentum=0.9)
    assert isinstance(sgd.optimizer, th.optim.SGD) and sgd.optimizer.param_groups[0]["momentum"] == 0.9
    radius = make_model(PGPE, radius_init=2.0)
    np.testing.assert_allclose(np.linalg.norm(radius.stdev), 2.0)
    assert make_model(PGPE, ranking=False).ranking == "raw" and make_model(PGPE, ranking=True).ranking == "centered"


# ------------------------------------------------------------------------------------------------- SNES, XNES


def by_hand_utilities(returns: list[float]) -> np.ndarray:
    """The NES utilities of distinct returns, from the formula."""
    n = len(returns)
    weights = [max(0.0, math.log(n / 2 + 1) - math.log(k)) for k in range(1, n + 1)]
    rank = {value: k for k, value in enumerate(sorted(returns, reverse=True))}
    return np.array([weights[rank[value]] / sum(weights) - 1 / n for value in returns])


def test_snes_one_step():
    stdev_init = np.linspace(0.1, 0.8, 8)
    model = make_model(SNES, popsize=5, zero_policy=False, stdev_init=stdev_init, center_learning_rate=0.7)
    mean = model.policy.parameters_to_vector().astype(np.float64)
    candidates = model.ask().astype(np.float64)
    returns = [3.0, -1.0, 0.5, 2.0, 1.0]
    model.tell(returns)
    u = by_hand_utilities(returns)
    z = [(candidate - mean) / stdev_init for candidate in candidates]
    eta_sigma = (3 + math.log(8)) / (5 * math.sqrt(8))  # the paper's default for d = 8
    expected_mean = mean + 0.7 * stdev_init * sum(u_k * z_k for u_k, z_k in zip(u, z, strict=True))
    expected_stdev = stdev_init * np.exp(eta_sigma / 2 * sum(u_k * (z_k**2 - 1) for u_k, z_k in zip(u, z, strict=True)))
    np.testing.assert_allclose(model.policy.parameters_to_vector(), expected_mean, atol=1e-5)
    np.testing.assert_allclose(model.stdev, expected_stdev, rtol=1e-5)  # z from float32 candidates


def symmetric_expm(matrix: np.ndarray) -> np.ndarray:
    """The exponential of a symmetric matrix through its eigendecomposition (not the code's route)."""
    eigenvalues, eigenvectors = np.linalg.eigh(matrix)
    return (eigenvectors * np.exp(eigenvalues)) @ eigenvectors.T


@pytest.mark.parametrize("shape_learning_rate", [None, 0.0])
def test_xnes_one_step(shape_learning_rate):
    rng = np.random.default_rng(3)
    factor = np.diag(np.linspace(0.2, 0.9, 8))
    model = make_model(XNES, popsize=6, zero_policy=False, shape_learning_rate=shape_learning_rate)
    model.covariance_factor = factor.copy()
    mean = model.policy.parameters_to_vector().astype(np.float64)
    candidates = model.ask().astype(np.float64)
    returns = rng.normal(size=6).tolist()
    model.tell(returns)
    u = by_hand_utilities(returns)
    z = [np.linalg.inv(factor) @ (candidate - mean) for candidate in candidates]
    g_delta = sum(u_k * z_k for u_k, z_k in zip(u, z, strict=True))
    g_m = sum(u_k * (np.outer(z_k, z_k) - np.eye(8)) for u_k, z_k in zip(u, z, strict=True))
    eta = 3 * (3 + math.log(8)) / (5 * 8 * math.sqrt(8))  # the paper's default for d = 8
    np.testing.assert_allclose(model.policy.parameters_to_vector(), mean + factor @ g_delta, atol=1e-5)
    if shape_learning_rate is None:
        # sigma and B with one rate: A <- A expm(eta / 2 * G_M)
        expected = factor @ symmetric_expm(eta / 2 * g_m)
    else:
        # the scale alone: A <- A exp(eta / 2 * tr(G_M) / d)
        expected = factor * math.exp(eta / 2 * np.trace(g_m) / 8)
    np.testing.assert_allclose(model.covariance_factor, expected, rtol=1e-4, atol=1e-7)
    assert model.scale == pytest.approx(abs(np.linalg.det(expected)) ** (1 / 8), rel=1e-4)


def test_nes_defaults_follow_the_number_of_parameters():
    for algorithm in (SNES, XNES):
        model = algorithm("LinearPolicy", "CartPole-v1")  # 8 parameters
        assert model.pop_size == model.popsize == 4 + math.floor(3 * math.log(8)) == 10
        assert len(model.ask()) == 10


# --------------------------------------------------------------------------------------------------- ES + ClipUp


def test_es_with_clipup_takes_a_step_of_the_learning_rate_along_its_gradient():
    model = make_model(ES, optimizer_class="clipup", learning_rate=0.1, weight_decay=0.0, sigma=0.5)
    assert isinstance(model.optimizer, ClipUp) and model.optimizer_kwargs == {}
    centre = model.policy.parameters_to_vector().astype(np.float64)
    candidates = model.ask().astype(np.float64)
    returns = np.array([3.0, 1.0, 4.0, 0.0, 2.0, 6.0, 5.0, 7.0])
    statistics = model.tell(returns)
    shaped = centered_ranks(returns)
    noise = (candidates[:4] - centre) / 0.5
    gradient = (shaped[:4] - shaped[4:]) @ noise
    step = model.policy.parameters_to_vector() - centre
    np.testing.assert_allclose(step, 0.1 * gradient / np.linalg.norm(gradient), atol=1e-6)
    assert statistics["train/speed"] == pytest.approx(0.1)
