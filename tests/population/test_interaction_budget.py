"""An interaction budget per round (num_interactions, popsize_max): rounds grow by batches until they have taken
enough env steps, the same way in-process and on any number of workers, and resume exactly."""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback

from lit_sb3 import AsyncEval
from lit_sb3.population import PGPE, SNES, XNES
from population.helpers import EpisodeRecorder, make_model, normalized_pendulum_vec_env, short_cartpole_vec_env
from population.test_resume import StopAfterEpisodes

BUDGETED = [PGPE, SNES, XNES]


def assert_same_round(model: PGPE, other: PGPE) -> None:
    """The same pending batches, and the same update after them (distribution, generator and optimiser state)."""
    while True:
        candidates = model.ask()
        np.testing.assert_array_equal(candidates, other.ask())
        returns, interactions = -np.abs(candidates).sum(axis=1), np.ones(len(candidates))
        statistics = model.tell(returns, interactions)
        assert other.tell(returns, interactions) == statistics
        if statistics:
            break
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), other.policy.parameters_to_vector())


def rounds_of(recorder: EpisodeRecorder) -> list[list[dict]]:
    """The episodes the callback saw, round by round (a round ends where the candidate indices restart)."""
    rounds: list[list[dict]] = []
    for step in recorder.steps:
        if not rounds or (step["candidate_index"] == 0 and step["episode_index"] == 0):
            rounds.append([])
        rounds[-1].append(step)
    return rounds


@pytest.mark.parametrize("algorithm", BUDGETED)
def test_a_round_grows_by_batches_until_it_has_taken_the_budget(algorithm):
    # CartPole cut at 50 steps: a batch of 8 takes at most 400 steps, so 300 steps need one to several batches.
    model = make_model(algorithm, env=short_cartpole_vec_env(), num_interactions=300)
    recorder = EpisodeRecorder()
    model.learn(3000, callback=recorder)
    rounds = rounds_of(recorder)
    assert len(rounds) == model._n_updates >= 3
    sizes = []
    for steps in rounds:
        size = steps[-1]["candidate_index"] + 1
        assert size % 8 == 0 and [step["candidate_index"] for step in steps] == list(range(size))
        lengths = np.array([step["episode_length"] for step in steps])
        assert lengths.sum() >= 300 > lengths[:-8].sum()  # enough steps, and not one batch more than needed
        sizes.append(size)
    assert max(sizes) > 8  # the short episodes of the first rounds made them grow
    assert model.num_timesteps == sum(step["episode_length"] for step in recorder.steps)


def test_popsize_max_stops_the_growth():
    model = make_model(PGPE, env=short_cartpole_vec_env(), num_interactions=10**9, popsize_max=20)
    recorder = EpisodeRecorder()
    model.learn(1, callback=recorder)
    assert model._n_updates == 1 and len(recorder.steps) == 24  # batches of 8 until there are 20 or more


def test_batches_of_a_round_see_different_episodes_and_candidates():
    model = make_model(PGPE, env=short_cartpole_vec_env(), num_interactions=10**9, popsize_max=16, zero_policy=False)
    recorder = EpisodeRecorder()
    model.learn(1, callback=recorder)
    weights = np.array([step["candidate_weights"] for step in recorder.steps])
    assert len(np.unique(weights, axis=0)) == 16


def test_ask_tell_with_a_budget_takes_each_batchs_interactions():
    model = make_model(PGPE, num_interactions=100)
    weights_before = model.policy.parameters_to_vector()
    first = model.ask()
    with pytest.raises(ValueError, match=r"tell\(\) needs the env steps of each candidate \(interactions\)"):
        model.tell(np.arange(8.0))
    with pytest.raises(ValueError, match=r"interactions must have one value per candidate, shape \(8,\)"):
        model.tell(np.arange(8.0), [10] * 7)
    for counts in ([10.5] * 8, [np.inf] * 8, [10] * 7 + [-1]):
        with pytest.raises(ValueError, match="interactions must be non-negative whole numbers"):
            model.tell(np.arange(8.0), counts)
    with pytest.raises(ValueError, match="interactions are all zero"):  # a round told them would never end
        model.tell(np.arange(8.0), [0] * 8)
    assert model.tell(np.arange(8.0), [10] * 8) == {}  # 80 steps: the round goes on, nothing is updated
    np.testing.assert_array_equal(model.policy.parameters_to_vector(), weights_before)
    second = model.ask()
    assert second.shape == (8, model.n_params) and not np.array_equal(second, first)
    statistics = model.tell(np.arange(8.0), [10] * 8)  # 160 steps
    assert statistics["train/pop_size"] == 16 and model._n_updates == 1
    assert not np.array_equal(model.policy.parameters_to_vector(), weights_before)
    assert len(model.ask()) == 8  # a new round starts with one batch


def test_interactions_are_refused_without_a_budget():
    model = make_model(PGPE)
    model.ask()
    with pytest.raises(ValueError, match="interactions are only counted with num_interactions set"):
        model.tell(np.arange(8.0), [10] * 8)


def test_set_parameters_drops_a_growing_round():
    model = make_model(PGPE, num_interactions=100)
    model.ask()
    model.tell(np.arange(8.0), [10] * 8)
    other = make_model(PGPE, zero_policy=False, seed=1)
    model.set_parameters(other.get_parameters())
    model.ask()
    assert model.tell(np.arange(8.0), [10] * 8) == {}  # a new round: 80 steps of 100


@pytest.mark.parametrize("algorithm", BUDGETED)
def test_a_budgeted_run_is_the_same_on_any_number_of_workers(algorithm):
    def trained(async_eval: AsyncEval | None = None) -> np.ndarray:
        model = make_model(algorithm, env=short_cartpole_vec_env(), num_interactions=300)
        model.learn(2000, async_eval=async_eval)
        assert model._n_updates >= 2
        return model.policy.parameters_to_vector()

    expected = trained()
    policy = make_model(algorithm, env=short_cartpole_vec_env()).policy
    with AsyncEval([short_cartpole_vec_env, short_cartpole_vec_env], policy) as two_workers:
        np.testing.assert_array_equal(trained(two_workers), expected)


def test_the_normalisation_stays_frozen_over_a_round_and_counts_every_batch():
    policy = make_model(PGPE, env=normalized_pendulum_vec_env()).policy
    with AsyncEval([normalized_pendulum_vec_env] * 2, policy) as async_eval:
        models = []
        for evaluator in (None, async_eval):
            model = make_model(PGPE, env=normalized_pendulum_vec_env(), num_interactions=400)  # three 160-step batches
            model.learn(1500, async_eval=evaluator)
            models.append(model)
    in_process, on_workers = models
    assert in_process.get_vec_normalize_env().obs_rms.count == in_process.num_timesteps + 1e-4
    for key in ("mean", "var"):
        np.testing.assert_array_equal(
            getattr(on_workers.get_vec_normalize_env().obs_rms, key),
            getattr(in_process.get_vec_normalize_env().obs_rms, key),
        )
    np.testing.assert_array_equal(on_workers.policy.parameters_to_vector(), in_process.policy.parameters_to_vector())


class StopInTheLastBatch(BaseCallback):
    """Stops training at the first episode of the first round's third batch (candidate 16 on)."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped = False

    def _on_step(self) -> bool:
        if not self.stopped and self.locals["candidate_index"] >= 16:
            self.stopped = True
            return False
        return True


@pytest.mark.parametrize("stop", ["in a later batch", "after some episodes"])
def test_a_budgeted_run_stopped_mid_round_resumes_exactly(stop, tmp_path):
    kwargs = {"num_interactions": 10**9, "popsize_max": 24}  # three batches a round
    whole = make_model(PGPE, env=normalized_pendulum_vec_env(), **kwargs)
    whole.learn(2000)
    stopped = make_model(PGPE, env=normalized_pendulum_vec_env(), **kwargs)
    callback = StopInTheLastBatch() if stop == "in a later batch" else StopAfterEpisodes(30)
    stopped.learn(2000, callback=callback)
    assert len(stopped._told_batches) == 2 and stopped._evaluated_round is not None  # stopped inside a round
    stopped.save(tmp_path / "stopped.zip")
    resumed = PGPE.load(tmp_path / "stopped.zip", env=normalized_pendulum_vec_env())
    resumed.learn(whole.num_timesteps - resumed.num_timesteps, reset_num_timesteps=False)
    assert resumed.num_timesteps == whole.num_timesteps and resumed._n_updates == whole._n_updates
    np.testing.assert_array_equal(
        whole.get_vec_normalize_env().obs_rms.mean, resumed.get_vec_normalize_env().obs_rms.mean
    )
    np.testing.assert_array_equal(resumed.stdev, whole.stdev)
    assert_same_round(whole, resumed)
