"""The workers' direct sampling of categorical and Gaussian actions against Stable-Baselines3's distributions."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.policies import ActorCriticPolicy

from lit_sb3.agents.episode_worker import sample_on_policy


@pytest.mark.parametrize(
    ("env_id", "policy_kwargs"),
    [("CartPole-v1", {}), ("Pendulum-v1", {}), ("Pendulum-v1", {"share_features_extractor": False})],
)
def test_log_probabilities_and_values_are_those_of_the_policy(env_id: str, policy_kwargs: dict) -> None:
    policy = PPO("MlpPolicy", env_id, n_steps=16, batch_size=16, policy_kwargs=policy_kwargs, seed=0).policy
    observations = th.as_tensor(np.random.default_rng(0).normal(size=(64, *policy.observation_space.shape)))
    with th.no_grad():
        actions, values, log_probs = sample_on_policy(policy, observations.float())
        expected_values, expected_log_probs, _ = policy.evaluate_actions(observations.float(), actions)
    assert actions.shape == (64, *policy.action_space.shape)
    assert th.equal(values, expected_values)
    assert th.equal(log_probs, expected_log_probs)


def test_categorical_actions_follow_the_policys_probabilities() -> None:
    policy = PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, seed=0).policy
    with th.no_grad():
        policy.action_net.bias.copy_(th.tensor([0.0, 1.0]))  # p(1) = e / (1 + e) = 0.731 at zero weights
        policy.action_net.weight.zero_()
        actions, _, _ = sample_on_policy(policy, th.zeros(20_000, 4))
    assert actions.float().mean().item() == pytest.approx(np.e / (1 + np.e), abs=0.015)


def test_gaussian_actions_have_the_policys_mean_and_spread() -> None:
    policy = PPO("MlpPolicy", "Pendulum-v1", n_steps=16, batch_size=16, seed=0).policy
    with th.no_grad():
        policy.action_net.weight.zero_()
        policy.action_net.bias.fill_(0.5)
        policy.log_std.fill_(np.log(0.2))
        actions, _, _ = sample_on_policy(policy, th.zeros(20_000, 3))
    assert actions.mean().item() == pytest.approx(0.5, abs=0.01)
    assert actions.std().item() == pytest.approx(0.2, abs=0.01)


def test_other_policies_act_through_their_own_forward() -> None:
    class Greedy(ActorCriticPolicy):
        def forward(self, obs: th.Tensor, deterministic: bool = False) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
            return super().forward(obs, deterministic=True)

    policy = PPO(Greedy, "CartPole-v1", n_steps=16, batch_size=16, seed=0).policy
    with th.no_grad():
        policy.action_net.weight.zero_()
        policy.action_net.bias.copy_(th.tensor([0.0, 1.0]))
        actions, _, _ = sample_on_policy(policy, th.zeros(1000, 4))
    assert bool((actions == 1).all())  # sampling would pick 0 about 270 times


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_a_given_generator_decides_the_actions_alone(env_id: str) -> None:
    policy = PPO("MlpPolicy", env_id, n_steps=16, batch_size=16, seed=0).policy
    observations = th.zeros(256, *policy.observation_space.shape)
    with th.no_grad():
        first, _, _ = sample_on_policy(policy, observations, th.Generator().manual_seed(3))
        th.manual_seed(1)  # the global generator plays no part
        again, _, _ = sample_on_policy(policy, observations, th.Generator().manual_seed(3))
        other, _, _ = sample_on_policy(policy, observations, th.Generator().manual_seed(4))
    assert th.equal(first, again)
    assert not th.equal(first, other)


def test_a_generator_is_refused_for_policies_acting_through_their_own_forward() -> None:
    class Greedy(ActorCriticPolicy):
        def forward(self, obs: th.Tensor, deterministic: bool = False) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
            return super().forward(obs, deterministic=True)

    policy = PPO(Greedy, "CartPole-v1", n_steps=16, batch_size=16, seed=0).policy
    with pytest.raises(TypeError, match="actions of Greedy cannot be drawn from a given generator"):
        sample_on_policy(policy, th.zeros(1, 4), th.Generator())
