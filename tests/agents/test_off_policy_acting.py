"""Off-policy acting in numpy: SAC's, TD3's and DQN's actions as their policies give them."""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import DDPG, DQN, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm

from agents.helpers import multi_env
from lit_sb3.collection import CollectionPlan
from lit_sb3.collection.episode_worker import EpisodeWorker
from lit_sb3.collection.off_policy_acting import NumpyOffPolicyActor
from lit_sb3.collection.weights import acting_module, flat_weights, load_flat_weights

CASES = [
    (SAC, "Pendulum-v1", {}),
    (SAC, "MountainCarContinuous-v0", {"net_arch": [32]}),
    (SAC, "Pendulum-v1", {"net_arch": []}),
    (TD3, "Pendulum-v1", {"net_arch": [16, 16]}),
    (DDPG, "MountainCarContinuous-v0", {}),
    (DQN, "CartPole-v1", {"net_arch": [32]}),
]


class NoNoise:
    """A generator whose normal draws are all 0: SAC's numpy actor then gives its deterministic action."""

    def standard_normal(self, size: int, dtype: type) -> np.ndarray:
        return np.zeros(size, dtype)


def model_of(algorithm: type[BaseAlgorithm], env_id: str, **policy_kwargs: object) -> Any:
    model: Any = algorithm
    return model("MlpPolicy", env_id, policy_kwargs=policy_kwargs, learning_starts=0, seed=0)


@pytest.mark.parametrize(("algorithm", "env_id", "policy_kwargs"), CASES)
def test_deterministic_parts_are_those_of_the_policy(
    algorithm: type[BaseAlgorithm], env_id: str, policy_kwargs: dict
) -> None:
    policy = model_of(algorithm, env_id, **policy_kwargs).policy
    actor = NumpyOffPolicyActor.for_policy(policy)
    assert actor is not None
    observations = np.random.default_rng(1).normal(size=(64, *policy.observation_space.shape)).astype(np.float32)
    actions = actor.predict(observations, [NoNoise()] * 64)  # type: ignore[list-item]
    expected, _ = policy.predict(observations, deterministic=True)
    assert actions.shape == expected.shape
    if actor.kind == "argmax":
        np.testing.assert_array_equal(actions, expected)
    else:
        np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-5)


def test_sac_actions_follow_the_policys_squashed_gaussian_and_each_episode_generator() -> None:
    policy: Any = model_of(SAC, "Pendulum-v1").policy
    with th.no_grad():
        policy.actor.mu.weight.zero_()
        policy.actor.mu.bias.fill_(0.3)
        policy.actor.log_std.weight.zero_()
        policy.actor.log_std.bias.fill_(np.log(0.5))
    actor = NumpyOffPolicyActor.for_policy(policy)
    assert actor is not None
    observations = np.zeros((20_000, 3), np.float32)
    actions = actor.predict(observations, [np.random.default_rng(seed) for seed in range(20_000)])
    expected_draws = np.tanh(0.3 + 0.5 * np.random.default_rng(7).standard_normal(200_000)) * 2.0  # bounds +-2
    assert actions.mean() == pytest.approx(expected_draws.mean(), abs=0.02)
    assert actions.std() == pytest.approx(expected_draws.std(), abs=0.02)
    th.manual_seed(5)
    state = th.random.get_rng_state()
    again = actor.predict(observations[:3], [np.random.default_rng(seed) for seed in range(3)])
    np.testing.assert_array_equal(again, actions[:3])
    assert th.equal(state, th.random.get_rng_state())  # torch's global generator was not used


def test_policies_of_other_shapes_keep_their_own_predict() -> None:
    gsde = SAC("MlpPolicy", "Pendulum-v1", use_sde=True, seed=0).policy
    discrete_observations = DQN("MlpPolicy", "FrozenLake-v1", seed=0).policy
    assert NumpyOffPolicyActor.for_policy(gsde) is None
    assert NumpyOffPolicyActor.for_policy(discrete_observations) is None


def test_workers_act_with_the_trainers_running_statistics() -> None:
    """CrossQ's actor normalises with running statistics (buffers, not parameters): they travel with the weights."""
    from sb3_contrib import CrossQ

    trainer, worker = (CrossQ("MlpPolicy", "Pendulum-v1", seed=seed).policy for seed in (0, 1))
    assert NumpyOffPolicyActor.for_policy(trainer) is None  # batch renormalisation: the policy's own predict
    with th.no_grad():
        for buffer in acting_module(trainer).buffers():
            if buffer.is_floating_point():
                buffer.uniform_(0.5, 2.0)
    load_flat_weights(acting_module(worker), flat_weights(acting_module(trainer)))
    trainer.set_training_mode(False)
    worker.set_training_mode(False)
    observations = np.random.default_rng(2).normal(size=(16, 3)).astype(np.float32)
    expected, _ = trainer.predict(observations, deterministic=True)
    np.testing.assert_array_equal(worker.predict(observations, deterministic=True)[0], expected)


def test_the_worker_acts_through_its_numpy_actor() -> None:
    model: Any = SAC("MlpPolicy", multi_env("Pendulum-v1", 1), learning_starts=0, seed=0)
    plan = CollectionPlan.for_algorithm(model, base_seed=0)
    worker = EpisodeWorker(
        [partial(gym.make, "Pendulum-v1")], model.policy, plan.acting, max_envs=1, progress=plan.progress(0)
    )
    try:
        assert worker._numpy_actor is not None
        with th.no_grad():
            model.policy.actor.mu.weight.zero_()
            model.policy.actor.mu.bias.fill_(10.0)  # tanh(10 + noise): the upper bound
        worker._numpy_actor.load(flat_weights(acting_module(model.policy)))
        worker.attach_emitter(lambda *_: None)
        worker.submit(0, "collect", (0,))
        worker.advance()
        actions = np.stack(worker._running[0].actions)
    finally:
        worker.close()
    np.testing.assert_allclose(actions, 1.0, atol=1e-4)  # scaled to [-1, 1] as the replay buffer stores them
