"""ask()/tell() without learn(): the optimiser core."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from lit_sb3.population import ARS, CMAES, ES, PGPE, SNES, XNES, PopulationAlgorithm
from lit_sb3.population.es import centered_ranks
from population.helpers import ALGORITHMS, make_model

TARGET = np.linspace(-1.0, 1.0, 8)  # CartPole's LinearPolicy has 2 x 4 weights


def distance_to_target(model: PopulationAlgorithm) -> float:
    return float(np.linalg.norm(model.policy.parameters_to_vector() - TARGET))


@pytest.mark.parametrize(
    ("algorithm", "kwargs"),
    [
        *((algorithm, {}) for algorithm in ALGORITHMS),
        (CMAES, {"cma_options": {"CMA_diagonal": True}}),
        (ES, {"optimizer_class": "clipup"}),
        (PGPE, {"optimizer": "adam", "center_learning_rate": 0.1}),
    ],
)
def test_ask_tell_alone_optimises_a_function(algorithm, kwargs):
    model = make_model(algorithm, **kwargs)
    start = distance_to_target(model)
    for _ in range(60):
        candidate_weights = model.ask()
        assert candidate_weights.shape == (model.pop_size, model.n_params)
        assert candidate_weights.dtype == np.float32
        model.tell(-np.sum((candidate_weights - TARGET) ** 2, axis=1))
    assert distance_to_target(model) < 0.3 * start
    assert model.num_timesteps == 0  # no environment step was taken
    if "cma_options" in kwargs:
        assert model.strategy.opts["CMA_diagonal"] is True  # the separable variant


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_ask_again_before_tell_returns_the_same_candidates(algorithm):
    model = make_model(algorithm)
    first = model.ask()
    first[:] = 0.0  # a copy: changing it changes nothing
    np.testing.assert_array_equal(model.ask(), model.ask())
    assert not np.array_equal(model.ask(), first)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tell_accepts_lists_and_tensors_and_returns_statistics(algorithm):
    """A list, a tensor and a numpy array of the same returns give the same update."""
    told = {kind: make_model(algorithm) for kind in ("numpy", "list", "tensor")}
    rng = np.random.default_rng(0)
    for _ in range(2):
        returns = rng.normal(size=len(told["numpy"].ask())).astype(np.float32)
        for kind in ("list", "tensor"):
            np.testing.assert_array_equal(told[kind].ask(), told["numpy"].ask())
        weights_before = told["numpy"].policy.parameters_to_vector()
        statistics = {
            "numpy": told["numpy"].tell(returns),
            "list": told["list"].tell(returns.tolist()),
            "tensor": told["tensor"].tell(th.from_numpy(returns)),
        }
        assert statistics["numpy"] and all(isinstance(value, float) for value in statistics["numpy"].values())
        assert statistics["list"] == statistics["numpy"] == statistics["tensor"]
        weights = told["numpy"].policy.parameters_to_vector()
        assert not np.array_equal(weights, weights_before)  # the update moved the centre
        for kind in ("list", "tensor"):
            np.testing.assert_array_equal(told[kind].policy.parameters_to_vector(), weights)
    assert all(model._n_updates == 2 for model in told.values())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tell_rejects_nan_returns_naming_the_candidates(algorithm):
    model = make_model(algorithm)
    returns = np.ones(len(model.ask()))
    returns[[1, 3]] = np.nan
    weights_before = model.policy.parameters_to_vector()
    with pytest.raises(ValueError, match=r"returns has NaN or infinite values for candidates \[1, 3\]"):
        model.tell(returns)
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), weights_before)
    model.tell(np.ones(len(model.ask())))  # the population is still pending


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tell_needs_a_pending_population_and_one_return_per_candidate(algorithm):
    model = make_model(algorithm)
    with pytest.raises(ValueError, match="call ask"):
        model.tell([1.0, 2.0])
    pop_size = len(model.ask())
    with pytest.raises(ValueError, match=f"shape \\({pop_size},\\)"):
        model.tell(np.ones(pop_size + 1))
    with pytest.raises(TypeError, match="returns must be numbers, one per candidate, got an array of <U3"):
        model.tell(["1.0"] * pop_size)
    with pytest.raises(TypeError, match="returns must be numbers, one per candidate, got an array of bool"):
        model.tell([True] * pop_size)


def test_centered_ranks_share_ties_and_span_minus_half_to_half():
    np.testing.assert_allclose(centered_ranks(np.array([3.0, 1.0, 3.0, 0.0])), [1 / 3, -1 / 6, 1 / 3, -0.5])
    np.testing.assert_allclose(centered_ranks(np.array([5.0, -2.0])), [0.5, -0.5])


@pytest.mark.parametrize("ddof", [0, 1])
def test_ars_steps_along_the_top_directions_scaled_by_the_std_of_their_returns(ddof):
    model = make_model(ARS, n_delta=3, n_top=2, learning_rate=0.5, delta_std=0.1, return_std_ddof=ddof)
    centre = model.policy.parameters_to_vector().copy()
    candidates = model.ask()
    # Plus returns 4, 1, 3 and minus returns 2, 5, 0.5: the better ones are 4, 5, 3, so directions 1 and 0 are kept.
    model.tell(np.array([4.0, 1.0, 3.0, 2.0, 5.0, 0.5]))
    directions = (candidates[:3] - centre) / 0.1
    differences = np.array([1.0 - 5.0, 4.0 - 2.0])
    step = 0.5 / (2 * np.std([1.0, 4.0, 5.0, 2.0], ddof=ddof))
    expected = centre + step * (differences @ directions[[1, 0]])
    np.testing.assert_allclose(model.policy.parameters_to_vector(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tell_takes_any_iterable_of_numbers_and_names_a_ragged_one(algorithm):
    model = make_model(algorithm)
    pop_size = len(model.ask())
    with pytest.raises(ValueError, match=rf"returns must have one number per candidate, shape \({pop_size},\)"):
        model.tell([[1.0, 2.0], *range(pop_size - 1)])
    assert model.tell(float(value) for value in range(pop_size))  # a generator
    assert model._n_updates == 1


@pytest.mark.parametrize(
    ("algorithm", "kwargs"),
    [
        (ARS, {}),
        (ARS, {"return_std_ddof": 1}),
        (PGPE, {"ranking": "normalized"}),
        *((algorithm, {"ranking": ranking}) for algorithm in (SNES, XNES) for ranking in ("raw", "normalized")),
    ],
)
def test_updates_that_do_not_depend_on_the_returns_scale_take_returns_of_any_size(algorithm, kwargs):
    """Returns of 1e301 give the update of the same returns at 1e0, bit for bit (their squares would overflow)."""
    models = [make_model(algorithm, **kwargs) for _ in range(2)]
    pop_sizes = {len(model.ask()) for model in models}
    returns = np.random.default_rng(0).normal(size=pop_sizes.pop())
    statistics = [model.tell(returns * scale) for model, scale in zip(models, (1.0, 2.0**1000), strict=True)]
    weights = [model.policy.parameters_to_vector() for model in models]
    assert np.all(np.isfinite(weights[1])) and not np.array_equal(
        weights[1], make_model(algorithm).policy.parameters_to_vector()
    )
    np.testing.assert_array_equal(*weights)
    if algorithm is ARS:
        assert statistics[1]["train/step_size"] == statistics[0]["train/step_size"] * 2.0**-1000


def test_a_search_gradient_too_large_for_float32_is_refused_before_anything_moves():
    model = make_model(PGPE, ranking="raw")  # the step of SGD or Adam follows the returns' scale
    returns = np.random.default_rng(0).normal(size=len(model.ask()))
    weights_before, stdev_before = model.policy.parameters_to_vector(), model.stdev.copy()
    with pytest.raises(FloatingPointError, match=r"the search gradient does not fit in float32 .*ranking='centered'"):
        model.tell(returns * 1e45)
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), weights_before)
    np.testing.assert_array_equal(model.stdev, stdev_before)
    assert model.tell(returns * 1e30)["train/speed"] > 0.0  # the same population, told again
