"""AsyncEval: results, reproducibility, options and reuse, with real worker processes."""

from __future__ import annotations

import functools
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from sb3_contrib.ars.policies import LinearPolicy
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

from fixture_envs import LivesWrapper, ScalarEnv, scalar_vec_env
from lit_sb3 import AsyncEval
from lit_sb3.vec_env.candidate_eval import InProcessEval


def random_population(policy: th.nn.Module, pop_size: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    n_params = sum(parameter.numel() for parameter in policy.parameters())
    return np.random.default_rng(seed).normal(0.0, scale, size=(pop_size, n_params)).astype(np.float32)


def evaluate(async_eval: AsyncEval | InProcessEval, weights: np.ndarray | th.Tensor, pop_size: int) -> list:
    async_eval.send_jobs(weights, pop_size)
    return async_eval.get_results()


def as_arrays(results: list) -> tuple[np.ndarray, np.ndarray]:
    return np.array([r for _, (r, _) in results]), np.array([n for _, (_, n) in results])


def test_results_cover_every_candidate_in_order(scalar_policy: LinearPolicy) -> None:
    weights = random_population(scalar_policy, 13)
    with AsyncEval([functools.partial(scalar_vec_env, random_length=True)] * 2, scalar_policy, n_eval_episodes=3) as ae:
        ae.seed(0)
        results = evaluate(ae, weights, 11)  # extra rows beyond pop_size are not evaluated
    assert [index for index, _ in results] == list(range(11))
    for _, (episode_returns, episode_lengths) in results:
        assert episode_returns.shape == (3,) and episode_lengths.shape == (3,)
        assert np.all((episode_lengths >= 1) & (episode_lengths <= 20))
        assert np.all(episode_returns <= 0.0)


def test_torch_and_numpy_weights_give_the_same_results(scalar_policy: LinearPolicy) -> None:
    weights = random_population(scalar_policy, 8)
    with AsyncEval([scalar_vec_env] * 2, scalar_policy) as ae:
        ae.seed(3)
        from_numpy = as_arrays(evaluate(ae, weights, 8))
        ae.seed(3)
        from_torch = as_arrays(evaluate(ae, th.as_tensor(weights), 8))
    np.testing.assert_array_equal(from_numpy[0], from_torch[0])


@pytest.mark.parametrize("n_envs", [1, 3])
def test_results_do_not_depend_on_workers_or_chunks(scalar_policy: LinearPolicy, n_envs: int) -> None:
    """Episode seeds derive from (seed, round, candidate, episode), not from the worker or slot."""
    weights = [random_population(scalar_policy, 10, seed=g) for g in range(2)]
    env_fn = functools.partial(scalar_vec_env, n_envs=n_envs, random_length=True)
    outcomes = []
    for n_workers, chunk_size in [(1, None), (2, 1), (3, 4)]:
        with AsyncEval([env_fn] * n_workers, scalar_policy, n_eval_episodes=2, chunk_size=chunk_size) as ae:
            ae.seed(42)
            outcomes.append([as_arrays(evaluate(ae, w, 10)) for w in weights])
    in_process = InProcessEval(scalar_vec_env(n_envs=2, random_length=True), scalar_policy, n_eval_episodes=2)
    in_process.seed(42)
    outcomes.append([as_arrays(evaluate(in_process, w, 10)) for w in weights])
    for other in outcomes[1:]:
        for (returns, lengths), (other_returns, other_lengths) in zip(outcomes[0], other, strict=True):
            np.testing.assert_array_equal(returns, other_returns)
            np.testing.assert_array_equal(lengths, other_lengths)
    # rounds differ from each other: the round index is part of the seed
    assert not np.array_equal(outcomes[0][0][1], outcomes[0][1][1])


def test_unseeded_runs_follow_numpys_global_generator(scalar_policy: LinearPolicy) -> None:
    weights = random_population(scalar_policy, 6)
    outcomes = []
    with AsyncEval([functools.partial(scalar_vec_env, random_length=True)] * 2, scalar_policy) as ae:
        for numpy_seed in [7, 7, 8]:
            np.random.seed(numpy_seed)
            ae.seed(None)  # back to "draw the seed from numpy when the next round is sent"
            outcomes.append(as_arrays(evaluate(ae, weights, 6)))
    np.testing.assert_array_equal(outcomes[0][1], outcomes[1][1])
    assert not np.array_equal(outcomes[0][1], outcomes[2][1])


def test_options_reach_every_reset_from_the_next_round(scalar_policy: LinearPolicy) -> None:
    zero_policy_weights = np.zeros((4, 2), np.float32)  # action 0: the first coordinate stays where it starts
    with AsyncEval([scalar_vec_env] * 2, scalar_policy, n_eval_episodes=2) as ae:
        ae.seed(0)
        ae.set_options({"start": 0.5})
        returns, lengths = as_arrays(evaluate(ae, zero_policy_weights, 4))
        np.testing.assert_allclose(returns, -0.5 * lengths, rtol=1e-6)
        ae.set_options([{"start": 1.0}, {"start": 1.0}])
        returns, lengths = as_arrays(evaluate(ae, zero_policy_weights, 4))
        np.testing.assert_allclose(returns, -1.0 * lengths, rtol=1e-6)
        ae.set_options(None)
        returns, _ = as_arrays(evaluate(ae, zero_policy_weights, 4))
        assert len(np.unique(returns)) > 1  # random starts again


def test_gsde_policies_are_evaluated(scalar_policy: LinearPolicy) -> None:
    """A gSDE policy holds sampled noise tensors that cannot be deep-copied: the evaluators rebuild it."""
    model = PPO("MlpPolicy", "Pendulum-v1", use_sde=True, n_steps=32, batch_size=32, n_epochs=1, seed=0)
    model.learn(32)
    weights = random_population(model.policy, 3, scale=0.1)
    outcomes = []
    for evaluator in [InProcessEval(model.get_env(), model.policy), AsyncEval([_pendulum] * 2, model.policy)]:
        with evaluator:
            evaluator.seed(0)
            outcomes.append(as_arrays(evaluate(evaluator, weights, 3)))
    np.testing.assert_array_equal(outcomes[0][0], outcomes[1][0])


def _pendulum() -> gym.Env:
    return Monitor(gym.make("Pendulum-v1"))  # as PPO wraps its env: the returns are the Monitor's


def test_in_process_evaluation_reads_the_weights_when_they_are_sent(scalar_policy: LinearPolicy) -> None:
    """Changing the array after send_jobs() changes nothing, as with workers (the weights are copied)."""
    weights = random_population(scalar_policy, 4)
    with InProcessEval(scalar_vec_env(), scalar_policy) as ie:
        ie.seed(2)
        expected = as_arrays(evaluate(ie, weights, 4))
        for changed in [weights.copy(), th.as_tensor(weights.copy())]:
            ie.seed(2)
            ie.send_jobs(changed, 4)
            changed[:] = 0.0
            np.testing.assert_array_equal(as_arrays(ie.get_results())[0], expected[0])


def test_pool_is_reusable_across_rounds_and_population_sizes(scalar_policy: LinearPolicy) -> None:
    with AsyncEval([scalar_vec_env] * 2, scalar_policy) as ae:
        for round_index, pop_size in enumerate([4, 16, 2, 16, 9]):
            results = evaluate(ae, random_population(scalar_policy, pop_size, seed=round_index), pop_size)
            assert [index for index, _ in results] == list(range(pop_size))


def test_batched_gymnasium_and_pendulum_paths_agree(scalar_policy: LinearPolicy) -> None:
    """The same population on Pendulum through a DummyVecEnv, one sub-env or four, gives the same rewards."""
    policy = LinearPolicy(*_pendulum_spaces())
    weights = random_population(policy, 8, scale=0.5)
    outcomes = []
    for n_envs in [1, 4]:
        env_fn = functools.partial(make_vec_env, "Pendulum-v1", n_envs=n_envs)
        with AsyncEval([env_fn] * 2, policy) as ae:
            assert ae.slot_counts == [n_envs, n_envs]
            ae.seed(5)
            outcomes.append(as_arrays(evaluate(ae, weights, 8)))
    np.testing.assert_array_equal(outcomes[0][0], outcomes[1][0])
    assert np.all(outcomes[0][1] == 200)


@pytest.mark.parametrize("stacked", [False, True], ids=["env-list", "vec-env"])
def test_episodes_are_the_monitors_as_sb3_contrib_counts_them(scalar_policy: LinearPolicy, stacked: bool) -> None:
    """Wrappers outside the Monitor that end lives and scale rewards change neither returns nor lengths."""

    def outcome(make_env: Callable[[], gym.Env], monitored: bool) -> tuple[np.ndarray, np.ndarray]:
        env = DummyVecEnv([make_env] * 2)
        with InProcessEval(VecFrameStack(env, n_stack=1) if stacked else env, scalar_policy, n_eval_episodes=2) as ie:
            assert list(ie._evaluator.slots.monitored) == [monitored] * 2
            ie.seed(4)
            return as_arrays(evaluate(ie, random_population(scalar_policy, 3), 3))

    returns, lengths = outcome(lambda: Monitor(ScalarEnv(length=12)), True)
    wrapped = outcome(lambda: LivesWrapper(Monitor(ScalarEnv(length=12)), life_length=5, reward_scale=10.0), True)
    np.testing.assert_array_equal(wrapped[0], returns)
    np.testing.assert_array_equal(wrapped[1], lengths)
    assert np.all(lengths == 12)
    # Without a Monitor every end counts, with the rewards the outer wrapper gives: the first life of 5 steps.
    lives_returns, lives_lengths = outcome(lambda: LivesWrapper(ScalarEnv(length=12), 5, 10.0), False)
    first_life_returns, _ = outcome(lambda: Monitor(ScalarEnv(length=5)), True)
    assert np.all(lives_lengths == 5)
    np.testing.assert_allclose(lives_returns, 10.0 * first_life_returns, rtol=1e-6)


def _pendulum_spaces() -> tuple:
    env = make_vec_env("Pendulum-v1")
    return env.observation_space, env.action_space


def test_forkserver_is_the_default_and_spawn_works(scalar_policy: LinearPolicy) -> None:
    weights = random_population(scalar_policy, 4)
    outcomes = []
    for start_method in [None, "spawn"]:
        with AsyncEval([scalar_vec_env] * 2, scalar_policy, start_method=start_method) as ae:
            expected_method = "forkserver" if start_method is None else start_method
            assert ae._pool._backend.start_method == expected_method  # type: ignore[attr-defined]
            ae.seed(1)
            outcomes.append(as_arrays(evaluate(ae, weights, 4)))
    np.testing.assert_array_equal(outcomes[0][0], outcomes[1][0])


def test_every_spelling_of_the_backend_gives_the_same_results(scalar_policy: LinearPolicy) -> None:
    weights = random_population(scalar_policy, 4)
    outcomes = []
    for backend, name in [("local", "processes"), ("processes", "processes"), ("threads", "threads")]:
        with AsyncEval([scalar_vec_env] * 2, scalar_policy, backend=backend) as ae:  # type: ignore[arg-type]
            assert ae._pool.backend.name == name
            ae.seed(1)
            outcomes.append(as_arrays(evaluate(ae, weights, 4)))
    for outcome in outcomes[1:]:
        np.testing.assert_array_equal(outcomes[0][0], outcome[0])


def test_gymnasium_vector_envs_do_not_depend_on_the_number_of_workers() -> None:
    """A vector-entry-point env cannot seed sub-environments one by one: chunks are seeded sessions of it."""
    env_fn = functools.partial(gym.make_vec, "CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point")
    policy = LinearPolicy(*_spaces(env_fn))
    weights = random_population(policy, 16, scale=0.3)
    outcomes = []
    for n_workers in [1, 2, 3]:
        with AsyncEval([env_fn] * n_workers, policy, n_eval_episodes=2) as ae:
            assert ae._pool.descriptions[0]["slot_env"] == "AutoresetSlots"
            ae.seed(0)
            outcomes.append(as_arrays(evaluate(ae, weights, 16)))
    for returns, lengths in outcomes[1:]:
        np.testing.assert_array_equal(returns, outcomes[0][0])
        np.testing.assert_array_equal(lengths, outcomes[0][1])
    assert np.all(outcomes[0][0] == outcomes[0][1])  # CartPole: one reward per step


def _spaces(env_fn: functools.partial) -> tuple:
    env = env_fn()
    return env.single_observation_space, env.single_action_space
