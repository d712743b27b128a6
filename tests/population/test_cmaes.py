"""CMAES and pycma: the policy is cma's mean in parameter space, the search stays on the algorithm's generator."""

from __future__ import annotations

import copy
import re
import warnings

import numpy as np
import pytest

from lit_sb3.population import CMAES
from population.helpers import make_model

TARGET = np.linspace(-1.0, 1.0, 8)  # CartPole's LinearPolicy: 4 x 2 weights


def run_rounds(model: CMAES, n_rounds: int) -> None:
    for _ in range(n_rounds):
        candidates = model.ask()
        model.tell(-((candidates - TARGET) ** 2).sum(axis=1))


def test_policy_is_the_mean_in_parameter_space_with_a_cma_transformation():
    with pytest.warns(DeprecationWarning):  # cma deprecates its genotype-phenotype transformations, still offers them
        model = make_model(CMAES, cma_options={"typical_x": np.full(8, 2.0)})
    run_rounds(model, 5)
    weights = model.policy.parameters_to_vector()
    np.testing.assert_array_equal(weights, model.strategy.result.xfavorite.astype(np.float32))
    assert np.abs(weights - (model.strategy.mean + 2.0)).max() < 1e-5  # not cma's internal (shifted) mean
    assert np.linalg.norm(weights - TARGET) < np.linalg.norm(TARGET)


def test_set_parameters_restarts_the_search_around_the_new_weights():
    source = make_model(CMAES)
    run_rounds(source, 10)
    model = make_model(CMAES, seed=1)
    run_rounds(model, 2)
    model.set_parameters(source.get_parameters())
    np.testing.assert_array_equal(model.strategy.result.xfavorite, source.policy.parameters_to_vector())
    assert model.strategy.countiter == 0 and model.strategy.sigma == model.sigma0
    loaded_weights = model.policy.parameters_to_vector()
    model.set_parameters(model.get_parameters())  # the same weights: the strategy carries on
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), loaded_weights)
    assert model.strategy.countiter == 0


def test_the_end_of_cma_diagonal_does_not_touch_numpy_global_generator():
    model = make_model(CMAES, cma_options={"CMA_diagonal": 2})  # diagonal for 2 rounds, full covariance after
    np.random.seed(1)
    state = np.random.get_state()
    run_rounds(model, 6)
    after = np.random.get_state()
    assert after[2] == state[2] and np.array_equal(after[1], state[1])
    other = make_model(CMAES, cma_options={"CMA_diagonal": 2})
    np.random.seed(2)  # a different global state: the same run
    run_rounds(other, 6)
    np.testing.assert_array_equal(model.ask(), other.ask())


def test_a_stopped_strategy_restarts_from_its_mean_with_a_larger_population():
    # A flat fitness stops cma at once (tolflatfitness=1): each round then restarts while restarts are left.
    model = make_model(CMAES, pop_size=4, restarts=2, incpopsize=1.5, cma_options={"tolflatfitness": 1})
    logged, restarts_seen = [], 0
    for _ in range(4):
        candidates = model.ask()
        stopping = copy.deepcopy(model.strategy)
        stopping.tell(list(candidates.astype(np.float64)), [0.0] * len(candidates))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            statistics = model.tell(np.zeros(len(candidates)))
        # Once no restart is left, the stopped strategy goes on, and says so.
        assert all(
            re.match(r"cma's termination criteria \w+(, \w+)* are met and no restart is left", str(warning.message))
            for warning in caught
        )
        logged.append(
            (len(candidates), *(statistics[f"train/{key}"] for key in ("pop_size", "restarts", "stopped")), len(caught))
        )
        if model.strategy.countiter == 0:  # a new strategy: from the stopped one's mean, with sigma0
            np.testing.assert_allclose(model.policy.parameters_to_vector(), stopping.result.xfavorite, rtol=1e-6)
            assert statistics["train/sigma"] == model.sigma0
            restarts_seen += 1
    assert restarts_seen == 2
    assert logged == [(4, 6.0, 1.0, 0.0, 0), (6, 9.0, 2.0, 0.0, 0), (9, 9.0, 2.0, 1.0, 1), (9, 9.0, 2.0, 1.0, 1)]


def test_cma_options_turn_cma_output_on_and_cannot_set_the_population_size():
    model = make_model(CMAES, cma_options={"verb_disp": 5, "verbose": 1})
    assert (model.strategy.opts["verb_disp"], model.strategy.opts["verbose"]) == (5, 1)
    assert make_model(CMAES).strategy.opts["verb_disp"] == 0  # off by default
    with pytest.raises(ValueError, match="cma_options must not set 'popsize_factor': use the pop_size argument"):
        make_model(CMAES, pop_size=4, cma_options={"popsize_factor": 3})
    # cma only warns about an option it cannot evaluate, and fails on it rounds later: refused when built.
    with pytest.raises(ValueError, match='cma_options: "abc" is not a safe string'):
        make_model(CMAES, cma_options={"maxiter": "abc"})
    assert make_model(CMAES, cma_options={"maxiter": "10 * N"}).strategy.opts["maxiter"] == 80
