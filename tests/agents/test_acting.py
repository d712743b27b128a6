"""The workers' ways of acting (direct torch sampling, numpy maths) against Stable-Baselines3's distributions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.envs import BitFlippingEnv
from stable_baselines3.common.policies import ActorCriticPolicy

from agents.agent_envs import CueEnv
from lit_sb3.collection.acting import (
    NumpyActorCritic,
    NumpyStateDependentActorCritic,
    sample_from_generators,
    sample_on_policy,
)


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


def numpy_acting_of(env_id: str, **policy_kwargs: Any) -> tuple[ActorCriticPolicy, NumpyActorCritic]:
    policy = PPO("MlpPolicy", env_id, n_steps=16, batch_size=16, policy_kwargs=policy_kwargs, seed=0).policy
    acting = NumpyActorCritic.for_policy(policy)
    assert acting is not None
    return policy, acting


@pytest.mark.parametrize(
    ("env_id", "policy_kwargs"),
    [
        ("CartPole-v1", {}),
        ("Pendulum-v1", {"share_features_extractor": False}),
        ("MountainCarContinuous-v0", {"net_arch": [32], "activation_fn": th.nn.ReLU, "log_std_init": -1.0}),
    ],
)
def test_numpy_values_and_log_probabilities_are_those_of_the_policy(env_id: str, policy_kwargs: dict) -> None:
    policy, acting = numpy_acting_of(env_id, **policy_kwargs)
    observations = np.random.default_rng(1).normal(size=(64, *policy.observation_space.shape)).astype(np.float32)
    actions, values, log_probs = acting.act(observations, [np.random.default_rng(seed) for seed in range(64)])
    with th.no_grad():
        expected = policy.evaluate_actions(th.as_tensor(observations), th.as_tensor(actions))
    expected_values, expected_log_probs = expected[0], expected[1]
    assert actions.shape == (64, *policy.action_space.shape)
    np.testing.assert_allclose(values, expected_values.flatten().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(log_probs, expected_log_probs.numpy(), rtol=1e-5, atol=1e-5)


def test_numpy_actions_follow_the_policys_distribution_and_each_episode_generator() -> None:
    policy, acting = numpy_acting_of("CartPole-v1")
    with th.no_grad():
        policy.action_net.weight.zero_()
        policy.action_net.bias.copy_(th.tensor([0.0, 1.0]))  # p(1) = e / (1 + e)
    acting.load(th.nn.utils.parameters_to_vector(policy.parameters()).detach().double().numpy())
    generators = [np.random.default_rng(seed) for seed in range(20_000)]
    actions, _, _ = acting.act(np.zeros((20_000, 4), np.float32), generators)
    assert actions.mean() == pytest.approx(np.e / (1 + np.e), abs=0.015)
    again, _, _ = acting.act(np.zeros((3, 4), np.float32), [np.random.default_rng(seed) for seed in range(3)])
    np.testing.assert_array_equal(again, actions[:3])
    pendulum, gaussian = numpy_acting_of("Pendulum-v1")
    with th.no_grad():
        pendulum.action_net.weight.zero_()
        pendulum.action_net.bias.fill_(0.5)
        pendulum.log_std.fill_(np.log(0.2))
    gaussian.load(th.nn.utils.parameters_to_vector(pendulum.parameters()).detach().double().numpy())
    actions, _, _ = gaussian.act(np.zeros((20_000, 3), np.float32), generators)
    assert actions.mean() == pytest.approx(0.5, abs=0.01)
    assert actions.std() == pytest.approx(0.2, abs=0.01)


def test_policies_of_other_shapes_get_no_numpy_acting() -> None:
    class Greedy(ActorCriticPolicy):
        def forward(self, obs: th.Tensor, deterministic: bool = False) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
            return super().forward(obs, deterministic=True)

    overridden = PPO(Greedy, "CartPole-v1", n_steps=16, batch_size=16, seed=0).policy
    gsde = PPO("MlpPolicy", "Pendulum-v1", n_steps=16, batch_size=16, use_sde=True, seed=0).policy
    discrete_observations = PPO("MlpPolicy", "FrozenLake-v1", n_steps=16, batch_size=16, seed=0).policy
    assert NumpyActorCritic.for_policy(overridden) is None
    assert NumpyActorCritic.for_policy(gsde) is None
    assert NumpyActorCritic.for_policy(discrete_observations) is None


GSDE_VARIANTS = [{}, {"use_expln": True}, {"full_std": False}, {"net_arch": []}, {"log_std_init": 0.5}]


@pytest.mark.parametrize("policy_kwargs", GSDE_VARIANTS)
def test_gsde_in_numpy_gives_the_policys_values_and_log_probabilities(policy_kwargs: dict) -> None:
    policy = PPO(
        "MlpPolicy", "Pendulum-v1", n_steps=16, batch_size=16, use_sde=True, policy_kwargs=policy_kwargs
    ).policy
    acting = NumpyStateDependentActorCritic.for_policy(policy)
    assert acting is not None
    observations = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    generator = np.random.default_rng(1)
    actions, values, log_probs = acting.act(observations, [acting.exploration_matrix(generator) for _ in range(64)])
    with th.no_grad():
        expected_values, expected_log_probs, _ = policy.evaluate_actions(
            th.as_tensor(observations), th.as_tensor(actions)
        )
    np.testing.assert_allclose(values, expected_values.flatten().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(log_probs, expected_log_probs.numpy(), rtol=1e-4, atol=1e-4)


def test_gsde_noise_grows_with_the_state_as_the_policys() -> None:
    """With no hidden layer the latent is the observation z: an action's noise z E has standard deviation
    sigma |z| around the mean, one matrix E per episode."""
    model = PPO("MlpPolicy", "Pendulum-v1", n_steps=16, batch_size=16, use_sde=True, policy_kwargs={"net_arch": []})
    with th.no_grad():
        model.policy.action_net.weight.zero_()
        model.policy.action_net.bias.fill_(0.5)
        model.policy.log_std.fill_(np.log(0.2))
    acting = NumpyStateDependentActorCritic.for_policy(model.policy)
    assert acting is not None
    generator = np.random.default_rng(0)
    for observation, spread in (([1.0, 2.0, 2.0], 0.6), ([0.5, 0.0, 0.0], 0.1)):
        observations = np.tile(np.float32(observation), (20_000, 1))
        matrices = [acting.exploration_matrix(generator) for _ in range(20_000)]
        actions, _, _ = acting.act(observations, matrices)
        assert actions.mean() == pytest.approx(0.5, abs=0.01)
        assert actions.std() == pytest.approx(spread, rel=0.03)
    same_episode = acting.act(np.float32([[1.0, 2.0, 2.0]] * 2), [matrices[0]] * 2)[0]
    assert same_episode[0] == same_episode[1]  # one matrix: the same state gets the same action


def test_gsde_with_squashed_actions_or_without_gsde_gets_no_numpy_gsde() -> None:
    squashed = {"squash_output": True}
    tanh = PPO("MlpPolicy", "Pendulum-v1", n_steps=16, batch_size=16, use_sde=True, policy_kwargs=squashed).policy
    plain = PPO("MlpPolicy", "Pendulum-v1", n_steps=16, batch_size=16).policy
    assert NumpyStateDependentActorCritic.for_policy(tanh) is None
    assert NumpyStateDependentActorCritic.for_policy(plain) is None


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_torch_networks_draw_the_actions_of_the_numpy_path_from_the_same_generators(env_id: str) -> None:
    """CNN and Dict policies compute their networks in torch and draw as the numpy path does, seed for seed."""
    policy, acting = numpy_acting_of(env_id)
    observations = np.random.default_rng(2).normal(size=(32, *policy.observation_space.shape)).astype(np.float32)
    expected = acting.act(observations, [np.random.default_rng(seed) for seed in range(32)])
    with th.no_grad():
        th.manual_seed(5)
        generators = [np.random.default_rng(seed) for seed in range(32)]
        drawn = sample_from_generators(policy, th.as_tensor(observations), generators)
        state_after = th.random.get_rng_state()
        th.manual_seed(5)
    assert th.equal(state_after, th.random.get_rng_state())  # torch's global generator was not used
    for got, wanted in zip(drawn, expected, strict=True):
        np.testing.assert_allclose(got, wanted, rtol=1e-5, atol=1e-5)


def test_dict_policies_draw_from_generators_with_the_policys_log_probabilities() -> None:
    policy = PPO("MultiInputPolicy", CueEnv("dict", "discrete"), n_steps=16, batch_size=16, seed=0).policy
    observations = {
        "cue": np.random.default_rng(0).integers(0, 2, size=(64, 2)).astype(np.int8),
        "t": np.arange(64, dtype=np.float32)[:, None] % 8,
    }
    tensors = {key: th.as_tensor(value) for key, value in observations.items()}
    with th.no_grad():
        actions, values, log_probs = sample_from_generators(
            policy, tensors, [np.random.default_rng(seed) for seed in range(64)]
        )
        expected_values, expected_log_probs, _ = policy.evaluate_actions(tensors, th.as_tensor(actions))
    assert set(actions.tolist()) == {0, 1, 2, 3}
    np.testing.assert_allclose(values, expected_values.flatten().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(log_probs, expected_log_probs.numpy(), rtol=1e-5, atol=1e-5)


def test_dict_observations_of_flat_keys_act_in_numpy_as_the_flattened_policy() -> None:
    """A goal environment's MultiInputPolicy (MultiBinary keys) and a Dict with an image key (torch path)."""
    policy = PPO("MultiInputPolicy", BitFlippingEnv(n_bits=4), n_steps=16, batch_size=16, seed=0).policy
    acting = NumpyActorCritic.for_policy(policy)
    assert acting is not None and acting.keys == ("achieved_goal", "desired_goal", "observation")
    rng = np.random.default_rng(3)
    observations = {key: rng.integers(0, 2, size=(32, 4)).astype(np.int8) for key in acting.keys}
    actions, values, log_probs = acting.act(observations, [np.random.default_rng(seed) for seed in range(32)])
    with th.no_grad():
        expected = policy.evaluate_actions({k: th.as_tensor(v) for k, v in observations.items()}, th.as_tensor(actions))
    np.testing.assert_allclose(values, expected[0].flatten().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(log_probs, expected[1].numpy(), rtol=1e-5, atol=1e-5)
    image_policy = PPO("MultiInputPolicy", BitFlippingEnv(n_bits=4, image_obs_space=True), n_steps=16, seed=0).policy
    assert NumpyActorCritic.for_policy(image_policy) is None
