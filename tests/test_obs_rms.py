"""Observation statistics: exact delta merging, VecNormalize inside workers, full statistics from get_obs_rms."""

from __future__ import annotations

import functools
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from sb3_contrib.ars.policies import LinearPolicy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecFrameStack, VecMonitor, VecNormalize

from fixture_envs import scalar_vec_env
from lit_sb3 import AsyncEval
from lit_sb3.evaluation.normalization import BUFFER_ROWS, FrozenNormalizer
from lit_sb3.evaluation.obs_rms import merge_obs_rms, subtract_running_mean_std
from lit_sb3.vec_env import CandidateEval, InProcessEval


def statistics_of(batches: list[np.ndarray]) -> RunningMeanStd:
    rms = RunningMeanStd(shape=batches[0].shape[1:])
    rms.update(np.concatenate(batches))
    return rms


def test_subtraction_undoes_combination_exactly() -> None:
    rng = np.random.default_rng(0)
    first, second = rng.normal(3.0, 2.0, (500, 4)), rng.normal(-1.0, 0.5, (300, 4))
    part = statistics_of([first])
    total = part.copy()
    total.update(second)
    rest = subtract_running_mean_std(total, part)
    np.testing.assert_allclose(rest.mean, second.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(rest.var, second.var(axis=0), rtol=1e-9)
    assert rest.count == pytest.approx(300)


def test_merging_counts_synced_data_once() -> None:
    rng = np.random.default_rng(1)
    synced = statistics_of([rng.normal(0.0, 1.0, (1000, 3))])
    seen = [rng.normal(5.0, 3.0, (200, 3)), rng.normal(-2.0, 1.0, (50, 3))]
    workers = []
    for batch in seen:
        worker = synced.copy()
        worker.update(batch)
        workers.append(worker)
    merged = merge_obs_rms(synced, workers, [synced, synced])
    expected = synced.copy()
    expected.update(np.concatenate(seen))
    np.testing.assert_allclose(merged.mean, expected.mean, rtol=1e-10)
    np.testing.assert_allclose(merged.var, expected.var, rtol=1e-9)
    assert merged.count == pytest.approx(expected.count)


def test_frozen_normalisation_is_vec_normalize_s_bit_for_bit() -> None:
    """Workers normalise as ``VecNormalize.normalize_obs`` does, clipping included, for float32 and float64 rows: the
    same float32 numbers reach the policy (its kernels cast their inputs to float32, as ``VecNormalize`` does)."""
    rng = np.random.default_rng(5)
    env = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")] * 3), norm_reward=False, clip_obs=1.5)
    env.obs_rms.update(rng.normal([2.0, -1.0, 0.5], [3.0, 0.01, 1.0], (50, 3)))
    normalizer = FrozenNormalizer(env)
    for dtype in (np.float32, np.float64):
        observations = rng.normal(0.0, 4.0, (3, 3)).astype(dtype)
        expected = env.normalize_obs(observations.copy())
        normalized = normalizer.normalize(observations.copy(), [0, 1, 2])
        np.testing.assert_array_equal(normalized.astype(np.float32), expected)
        assert np.abs(normalized).max() == 1.5  # some values were clipped


def test_an_episode_s_statistics_are_those_of_its_rows_in_fixed_batches() -> None:
    """Whatever the other slots do, an episode's statistics fold its rows in batches of ``BUFFER_ROWS``, and each row
    is the observation as it was when the policy acted on it (the slot's array is overwritten by the next step)."""
    rng = np.random.default_rng(6)
    env = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")] * 2), norm_reward=False)
    normalizer = FrozenNormalizer(env)
    n_rows = 2 * BUFFER_ROWS + 17
    rows = rng.normal(1.0, 2.0, (n_rows, 3))
    observations = np.zeros((2, 3))
    for index, row in enumerate(rows):
        observations[0] = row
        observations[1] = -row
        normalizer.normalize(observations, [0, 1] if index % 3 else [0])
    episode = normalizer.end_episode(0)
    expected = RunningMeanStd(epsilon=0.0, shape=(3,))
    for start in range(0, n_rows, BUFFER_ROWS):
        expected.update(rows[start : start + BUFFER_ROWS])
    assert isinstance(episode, RunningMeanStd)
    assert episode.count == expected.count == n_rows
    np.testing.assert_array_equal(episode.mean, expected.mean)
    np.testing.assert_array_equal(episode.var, expected.var)
    other = normalizer.end_episode(1)
    assert isinstance(other, RunningMeanStd)
    assert other.count == n_rows - len(range(0, n_rows, 3))
    np.testing.assert_allclose(other.mean, -rows[[i for i in range(n_rows) if i % 3]].mean(axis=0))


def test_merged_statistics_equal_those_of_every_observation(tmp_path: Path) -> None:
    """After several generations of merge + sync, the statistics are those of all observations the policies saw."""
    env_fn = functools.partial(scalar_vec_env, n_envs=2, normalize=True, random_length=True, log_dir=str(tmp_path))
    env = scalar_vec_env()
    policy = LinearPolicy(env.observation_space, env.action_space)
    rng = np.random.default_rng(0)
    with AsyncEval([env_fn] * 2, policy, n_eval_episodes=2) as ae:
        main_rms = ae.synced_obs_rms[0].copy()
        assert main_rms.count == pytest.approx(1e-4)  # a fresh VecNormalize
        for _ in range(4):
            ae.send_jobs(rng.normal(size=(6, 2)).astype(np.float32), 6)
            ae.get_results()
            full = ae.get_obs_rms()
            assert all(worker.count > main_rms.count for worker in full)  # each worker's full statistics
            main_rms = ae.merge_obs_rms(main_rms)
            ae.sync_obs_rms(main_rms)
    observations = [np.load(path) for path in sorted(tmp_path.glob("obs-*.npy"))]
    expected = RunningMeanStd(shape=(2,))  # VecNormalize's own start: count 1e-4, mean 0, var 1
    expected.update(np.concatenate(observations).astype(np.float64))
    np.testing.assert_allclose(main_rms.mean, expected.mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(main_rms.var, expected.var, rtol=1e-9)
    assert main_rms.count == pytest.approx(expected.count, rel=1e-12)


def run_normalised_rounds(evaluator: CandidateEval, weights: np.ndarray) -> tuple[np.ndarray, list[RunningMeanStd]]:
    """Three rounds with merge and sync between them: every candidate's returns and the merged statistics."""
    evaluator.seed(11)
    rounds, merged = [], []
    for _ in range(3):
        evaluator.send_jobs(weights, len(weights))
        rounds.append([returns for _, (returns, _) in evaluator.get_results()])
        merged.append(evaluator.merge_obs_rms())
        evaluator.sync_obs_rms(merged[-1])
    return np.array(rounds), merged


def test_normalisation_is_frozen_within_a_round_and_merged_in_candidate_order(scalar_policy: LinearPolicy) -> None:
    """Returns and merged statistics are bit-identical in-process and for any number of workers, sub-environments
    per worker and chunk size: each episode's statistics come back with its results and are added in candidate
    order."""
    weights = np.random.default_rng(3).normal(size=(8, 2)).astype(np.float32)
    env_fn = functools.partial(scalar_vec_env, normalize=True, random_length=True)
    outcomes = []
    with InProcessEval(env_fn(), scalar_policy, n_eval_episodes=2) as in_process:
        outcomes.append(run_normalised_rounds(in_process, weights))
    for n_workers, n_envs, chunk_size, backend in [(1, 1, None, None), (2, 1, None, None), (2, 3, 1, "threads")]:
        worker_env_fn = functools.partial(env_fn, n_envs=n_envs)
        with AsyncEval(
            [worker_env_fn] * n_workers, scalar_policy, n_eval_episodes=2, chunk_size=chunk_size, backend=backend
        ) as ae:
            outcomes.append(run_normalised_rounds(ae, weights))
            # Snapshots, also from threads of this process: the next round changes none of them, nor what was synced.
            snapshots = [*ae.get_obs_rms(), *ae.synced_obs_rms, outcomes[-1][1][-1]]
            counts = [rms.count for rms in snapshots]
            ae.send_jobs(weights, len(weights))
            ae.get_results()
            assert all(rms.count > counts[0] for rms in ae.get_obs_rms())
            assert [rms.count for rms in snapshots] == counts
    reference_returns, reference_merged = outcomes[0]
    for returns, merged in outcomes[1:]:
        np.testing.assert_array_equal(returns, reference_returns)
        for rms, reference in zip(merged, reference_merged, strict=True):
            assert rms.count == reference.count
            np.testing.assert_array_equal(rms.mean, reference.mean)
            np.testing.assert_array_equal(rms.var, reference.var)
    assert not np.allclose(reference_returns[0], reference_returns[2])  # normalisation changed between rounds
    assert reference_merged[0].count < reference_merged[2].count


@pytest.mark.parametrize("wrap", ["monitor_outside", "frame_stack_outside"])
def test_normalisation_under_other_wrappers_is_frozen_too(scalar_policy: LinearPolicy, wrap: str) -> None:
    """VecNormalize under VecMonitor (peeled) or under VecFrameStack (kept, updates turned off) is frozen per round."""
    wrapper = VecMonitor if wrap == "monitor_outside" else functools.partial(VecFrameStack, n_stack=1)
    env_fn = functools.partial(_wrapped_normalized_env, wrapper)
    weights = np.random.default_rng(4).normal(size=(8, 2)).astype(np.float32)
    outcomes = []
    for n_workers in [1, 2]:
        with AsyncEval([env_fn] * n_workers, scalar_policy) as ae:
            ae.seed(2)
            rounds = []
            for _ in range(3):
                ae.send_jobs(weights, 8)
                rounds.append([returns for _, (returns, _) in ae.get_results()])
                ae.sync_obs_rms(ae.merge_obs_rms())
            outcomes.append(np.array(rounds))
            assert ae.synced_obs_rms[0].count > 100
    np.testing.assert_array_equal(outcomes[0], outcomes[1])


def _wrapped_normalized_env(wrapper: type) -> VecEnv:
    return wrapper(scalar_vec_env(normalize=True, random_length=True))


def test_episodes_of_a_dead_worker_are_counted_once_when_rerun(scalar_policy: LinearPolicy, tmp_path: Path) -> None:
    """A worker killed mid-round loses its unfinished episodes' observations: the merged statistics are those of the
    undisturbed run, bit for bit."""
    weights = np.random.default_rng(0).normal(size=(12, 2)).astype(np.float32)
    weights[7] = 1e6  # drives ScalarEnv's action past its trigger: the worker running it is killed, once
    marker = tmp_path / "crashed-once"
    env_fn = functools.partial(
        scalar_vec_env, normalize=True, random_length=True, trigger=100.0, on_trigger="sigkill", marker=str(marker)
    )
    merged = []
    for _ in range(2):  # the second time the marker exists: no crash
        with AsyncEval([env_fn] * 2, scalar_policy, n_eval_episodes=2, chunk_size=2) as ae:
            ae.seed(9)
            ae.send_jobs(weights, 12)
            ae.get_results()
            merged.append(ae.merge_obs_rms())
            restarts = ae._pool.restarts
        assert marker.exists() and restarts == (1 if len(merged) == 1 else 0)
    assert merged[0].count == merged[1].count > 12 * 2
    np.testing.assert_array_equal(merged[0].mean, merged[1].mean)
    np.testing.assert_array_equal(merged[0].var, merged[1].var)


def test_vec_normalize_without_observation_normalisation(scalar_policy: LinearPolicy) -> None:
    """VecNormalize(norm_obs=False) keeps no observation statistics: the evaluators have none to give or take, the
    returns are the original rewards', and the population methods train on it."""
    from lit_sb3.population import ARS

    def env_fn() -> VecEnv:
        return VecNormalize(scalar_vec_env(n_envs=2), norm_obs=False, norm_reward=True)

    weights = np.random.default_rng(2).normal(size=(4, 2)).astype(np.float32)
    outcomes = []
    for evaluator in [InProcessEval(env_fn(), scalar_policy), InProcessEval(scalar_vec_env(), scalar_policy)]:
        with evaluator:
            outcomes.append(run_rounds_without_statistics(evaluator, weights))
    with AsyncEval([env_fn] * 2, scalar_policy) as ae:
        outcomes.append(run_rounds_without_statistics(ae, weights))
        assert ae.get_obs_rms() == [None, None]
        with pytest.raises(ValueError, match="have no VecNormalize"):
            ae.sync_obs_rms(RunningMeanStd(shape=(2,)))
    for returns in outcomes[1:]:
        np.testing.assert_array_equal(returns, outcomes[0])
    with pytest.warns(UserWarning, match="norm_reward=True"):
        model = ARS("LinearPolicy", env_fn(), n_delta=2, seed=0).learn(200)
    assert model.num_timesteps >= 200 and model.exact_obs_rms is None


def run_rounds_without_statistics(evaluator: CandidateEval, weights: np.ndarray) -> np.ndarray:
    evaluator.seed(7)
    evaluator.send_jobs(weights, len(weights))
    return np.array([returns for _, (returns, _) in evaluator.get_results()])
