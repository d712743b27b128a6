"""ask()/tell() without learn(): the optimiser core."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch as th

from lit_sb3.population import ARS, CEM, CMAES, ES, PGPE, SNES, XNES, PopulationAlgorithm
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
    """Returns 2**1000 (about 1e301) times larger give the same update, bit for bit (their squares would overflow)."""
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


@pytest.mark.parametrize(
    ("optimizer", "scale"),
    [("clipup", 1e45), ("adam", 1e25), ("sgd", 1e45)],  # Adam keeps the gradient's square: 1e25 overflows it
)
def test_a_step_that_is_not_finite_in_float32_is_refused_and_nothing_moves(optimizer, scale):
    # With raw returns the search gradient follows their scale (ClipUp's step does not, but its input is float32).
    model = make_model(PGPE, ranking="raw", optimizer=optimizer)
    returns = np.random.default_rng(0).normal(size=len(model.ask()))
    weights_before, stdev_before = model.policy.parameters_to_vector(), model.stdev.copy()
    state_before = copy.deepcopy(model.optimizer.state_dict())
    with pytest.raises(FloatingPointError, match=r"step along a search gradient .*\(ranking='centered'\)"):
        model.tell(returns * scale)
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), weights_before)
    np.testing.assert_array_equal(model.stdev, stdev_before)
    assert str(model.optimizer.state_dict()) == str(state_before)
    model.tell(returns)  # the same population, told again
    assert np.all(np.isfinite(model.policy.parameters_to_vector()))
    assert not np.array_equal(model.policy.parameters_to_vector(), weights_before)


def test_tell_refuses_returns_without_the_order_of_the_candidates():
    model = make_model(CEM)
    pop_size = len(model.ask())
    with pytest.raises(TypeError, match="returns must be numbers in the order of ask\\(\\)'s rows, got a dict"):
        model.tell({index: float(index) for index in range(pop_size)})
    with pytest.raises(TypeError, match="got a set"):
        model.tell({float(index) for index in range(pop_size)})
    assert model.tell({index: float(index) for index in range(pop_size)}.values())


def test_an_optimizer_class_of_the_users_is_matched_to_its_signature_and_built_on_the_policy():
    """Muon takes 2-D parameters only: it is built on the policy's, not on a stand-in."""
    model = make_model(PGPE, env="Pendulum-v1", optimizer=th.optim.Muon)  # one (1, 3) weight matrix
    model.tell(np.arange(float(len(model.ask()))))
    assert isinstance(model.optimizer, th.optim.Muon) and model._n_updates == 1
    with pytest.raises(TypeError, match=r"the optimizer's settings are refused: Muon\(.*foo=1\)"):
        make_model(PGPE, env=None, optimizer=th.optim.Muon, optimizer_config={"foo": 1}, _init_setup_model=False)
