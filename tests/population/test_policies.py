"""LinearPolicy and MlpPolicy: behaviour, flat layout, and the numpy evaluation kernel."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib.ars.policies import ARSLinearPolicy, ARSPolicy

from lit_sb3.evaluation.policy_kernels import NumpyMlpPolicy, make_batched_policy
from lit_sb3.policies import LinearPolicy, MlpPolicy

BOX_OBS = spaces.Box(-2.0, 2.0, shape=(5,), dtype=np.float32)
SPACES_AND_KWARGS = [
    (spaces.Discrete(3), LinearPolicy, {}),
    (spaces.Box(-1.5, 0.5, shape=(2,), dtype=np.float32), LinearPolicy, {}),
    (spaces.Box(-1.5, 0.5, shape=(2,), dtype=np.float32), LinearPolicy, {"with_bias": True, "squash_output": True}),
    (spaces.Discrete(3), MlpPolicy, {"net_arch": [8, 8]}),
    (spaces.Box(-1.5, 0.5, shape=(2,), dtype=np.float32), MlpPolicy, {"net_arch": [8], "activation_fn": th.nn.Tanh}),
    (spaces.Box(-1.5, 0.5, shape=(2,), dtype=np.float32), MlpPolicy, {"squash_output": False}),
]


def random_weights(policy: MlpPolicy, rng: np.random.Generator) -> np.ndarray:
    return rng.normal(0.0, 2.0, size=policy.parameters_to_vector().shape).astype(np.float32)


@pytest.mark.parametrize(("action_space", "policy_class", "kwargs"), SPACES_AND_KWARGS)
def test_numpy_kernel_is_chosen_and_matches_predict(action_space, policy_class, kwargs):
    policy = policy_class(BOX_OBS, action_space, **kwargs)
    kernel = make_batched_policy(policy, n_slots=3)
    assert isinstance(kernel, NumpyMlpPolicy)
    rng = np.random.default_rng(0)
    weights = [random_weights(policy, rng) for _ in range(3)]
    for slot, slot_weights in enumerate(weights):
        kernel.load(slot, slot_weights)
    observations = rng.uniform(-2.0, 2.0, size=(3, 5)).astype(np.float32)
    actions = kernel.act(observations, [0, 1, 2])
    for slot, slot_weights in enumerate(weights):
        policy.load_from_vector(slot_weights)
        expected, _ = policy.predict(observations[slot], deterministic=True)
        np.testing.assert_allclose(actions[slot], expected, rtol=1e-5, atol=1e-5)


def test_box_actions_are_clipped_or_squashed_into_the_bounds():
    action_space = spaces.Box(-1.5, 0.5, shape=(2,), dtype=np.float32)
    observation = np.full(5, 2.0, dtype=np.float32)
    clipped = LinearPolicy(BOX_OBS, action_space)
    clipped.load_from_vector(np.full(clipped.parameters_to_vector().shape, 10.0))
    np.testing.assert_array_equal(clipped.predict(observation)[0], [0.5, 0.5])
    squashed = MlpPolicy(BOX_OBS, action_space, net_arch=[])
    squashed.load_from_vector(np.zeros(squashed.parameters_to_vector().shape))
    np.testing.assert_allclose(squashed.predict(observation)[0], [-0.5, -0.5])  # tanh(0) is the middle


def test_discrete_action_is_the_argmax():
    policy = LinearPolicy(BOX_OBS, spaces.Discrete(3))
    weights = np.zeros((3, 5), dtype=np.float32)
    weights[2, 0] = 1.0
    policy.load_from_vector(weights.ravel())
    assert policy.predict(np.eye(5, dtype=np.float32)[0])[0] == 2


@pytest.mark.parametrize(
    ("ours", "theirs", "kwargs"),
    [(LinearPolicy, ARSLinearPolicy, {}), (MlpPolicy, ARSPolicy, {"net_arch": [16, 16]})],
)
def test_flat_layout_and_state_dict_match_sb3_contrib(ours, theirs, kwargs):
    action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    our_policy, their_policy = ours(BOX_OBS, action_space, **kwargs), theirs(BOX_OBS, action_space, **kwargs)
    their_policy.load_from_vector(random_weights(their_policy, np.random.default_rng(1)))
    assert list(our_policy.state_dict()) == list(their_policy.state_dict())
    our_policy.load_from_vector(their_policy.parameters_to_vector())
    observation = np.linspace(-1.0, 1.0, 5, dtype=np.float32)
    np.testing.assert_allclose(our_policy.predict(observation)[0], their_policy.predict(observation)[0], rtol=1e-6)


@pytest.mark.parametrize("policy_class", [LinearPolicy, MlpPolicy])
def test_policy_save_and_load_keep_the_constructor_arguments(policy_class, tmp_path):
    policy = policy_class(BOX_OBS, spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32), with_bias=True)
    policy.load_from_vector(random_weights(policy, np.random.default_rng(2)))
    policy.save(tmp_path / "policy.pth")
    loaded = policy_class.load(tmp_path / "policy.pth")
    assert loaded.with_bias and loaded.squash_output == policy.squash_output
    np.testing.assert_array_equal(loaded.parameters_to_vector(), policy.parameters_to_vector())


def test_unsupported_action_space_is_rejected():
    with pytest.raises(ValueError, match="action_space must be Box or Discrete"):
        MlpPolicy(BOX_OBS, spaces.MultiDiscrete([2, 3]))


def test_squashing_needs_bounded_actions():
    unbounded = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
    with pytest.raises(ValueError, match=r"squash_output=True squashes actions .* infinite bounds"):
        MlpPolicy(BOX_OBS, unbounded)
    action, _ = MlpPolicy(BOX_OBS, unbounded, squash_output=False).predict(BOX_OBS.sample())
    assert np.isfinite(action).all()


def test_cartpole_policy_runs_on_gym_observations():
    env = gym.make("CartPole-v1")
    policy = LinearPolicy(env.observation_space, env.action_space)
    observation, _ = env.reset(seed=0)
    action, _ = policy.predict(observation)
    assert env.action_space.contains(int(action))
