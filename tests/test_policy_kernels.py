"""The batched numpy path computes the actions of ``policy.predict(obs, deterministic=True)``, batch-invariantly."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib.ars.policies import LinearPolicy, MlpPolicy
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.sac.policies import SACPolicy
from stable_baselines3.td3.policies import TD3Policy
from torch import nn

from lit_sb3.evaluation.policy_kernels import LayerStack, NumpyMlpPolicy, TorchPolicyCopies, make_batched_policy

OBSERVATION_SPACE = spaces.Box(-10.0, 10.0, shape=(5,), dtype=np.float32)
BOX = spaces.Box(np.array([-2.0, -1.0, 0.0], np.float32), np.array([2.0, 3.0, 0.5], np.float32))
DISCRETE = spaces.Discrete(4)


def constant(_: float) -> float:
    return 0.0


POLICIES = {
    "ars-linear-box": lambda: LinearPolicy(OBSERVATION_SPACE, BOX),
    "ars-linear-bias-box": lambda: LinearPolicy(OBSERVATION_SPACE, BOX, with_bias=True),
    "ars-linear-squashed-box": lambda: LinearPolicy(OBSERVATION_SPACE, BOX, squash_output=True),
    "ars-linear-discrete": lambda: LinearPolicy(OBSERVATION_SPACE, DISCRETE),
    "ars-mlp-box": lambda: MlpPolicy(OBSERVATION_SPACE, BOX, net_arch=[64, 64]),
    "ars-mlp-discrete": lambda: MlpPolicy(OBSERVATION_SPACE, DISCRETE, net_arch=[16], activation_fn=nn.Tanh),
    "actor-critic-box": lambda: ActorCriticPolicy(OBSERVATION_SPACE, BOX, constant, net_arch=[64, 64]),
    "actor-critic-discrete": lambda: ActorCriticPolicy(OBSERVATION_SPACE, DISCRETE, constant, net_arch=[32]),
    "actor-critic-separate": lambda: ActorCriticPolicy(
        OBSERVATION_SPACE, BOX, constant, net_arch=dict(pi=[16, 8], vf=[4]), share_features_extractor=False
    ),
    "td3": lambda: TD3Policy(OBSERVATION_SPACE, BOX, constant, net_arch=[32, 32]),
    "sac": lambda: SACPolicy(OBSERVATION_SPACE, BOX, constant, net_arch=[32, 32]),
}


def flat_weights(policy: BasePolicy, rng: np.random.Generator, scale: float = 0.5) -> np.ndarray:
    n_params = sum(parameter.numel() for parameter in policy.parameters())
    return rng.normal(0.0, scale, n_params).astype(np.float32)


def predict(policy: BasePolicy, weights: np.ndarray, observations: np.ndarray) -> np.ndarray:
    policy.load_from_vector(weights)
    actions, _ = policy.predict(observations, deterministic=True)
    return actions


@pytest.mark.parametrize("name", list(POLICIES))
def test_numpy_path_matches_predict(name: str) -> None:
    rng = np.random.default_rng(0)
    policy = POLICIES[name]()
    n_slots = 6
    batched = make_batched_policy(policy, n_slots)
    assert isinstance(batched, NumpyMlpPolicy)
    weights = [flat_weights(policy, rng) for _ in range(n_slots)]
    for slot, slot_weights in enumerate(weights):
        batched.load(slot, slot_weights)
    for _ in range(20):
        observations = rng.normal(0.0, 3.0, (n_slots, 5)).astype(np.float32)
        actions = batched.act(observations, list(range(n_slots)))
        for slot in range(n_slots):
            expected = predict(policy, weights[slot], observations[slot : slot + 1])[0]
            if isinstance(policy.action_space, spaces.Discrete):
                assert actions[slot] == expected
            else:  # float32 sums in another order: errors of a few ulps of the summed terms (~1), not of the result
                np.testing.assert_allclose(actions[slot], expected, rtol=1e-5, atol=5e-5)


@pytest.mark.parametrize("name", ["ars-linear-box", "ars-mlp-box", "actor-critic-discrete", "sac"])
def test_actions_do_not_depend_on_the_batch(name: str) -> None:
    """A slot's actions are bit-identical whatever the other slots hold and however many there are."""
    rng = np.random.default_rng(1)
    policy = POLICIES[name]()
    weights = flat_weights(policy, rng)
    observation = rng.normal(0.0, 3.0, 5).astype(np.float32)
    reference = None
    for n_slots in [1, 3, 8, 17]:
        for slot in {0, n_slots // 2, n_slots - 1}:
            batched = make_batched_policy(policy, n_slots)
            observations = rng.normal(0.0, 3.0, (n_slots, 5)).astype(np.float32)
            for other in range(n_slots):
                batched.load(other, flat_weights(policy, rng))
            batched.load(slot, weights)
            observations[slot] = observation
            action = batched.act(observations, list(range(n_slots)))[slot]
            if reference is None:
                reference = action
            np.testing.assert_array_equal(action, reference)


def test_unknown_shapes_fall_back_to_torch_and_match_predict() -> None:
    rng = np.random.default_rng(2)
    policy = MlpPolicy(OBSERVATION_SPACE, BOX, net_arch=[8], activation_fn=nn.ELU)  # no numpy ELU kernel
    batched = make_batched_policy(policy, 2)
    assert isinstance(batched, TorchPolicyCopies)
    weights = [flat_weights(policy, rng) for _ in range(2)]
    for slot in range(2):
        batched.load(slot, weights[slot])
    observations = rng.normal(0.0, 3.0, (2, 5)).astype(np.float32)
    actions = batched.act(observations, [0, 1]).copy()
    for slot in range(2):
        np.testing.assert_array_equal(actions[slot], predict(policy, weights[slot], observations[slot : slot + 1])[0])


def test_float64_observations_are_cast_like_predict() -> None:
    rng = np.random.default_rng(3)
    policy = LinearPolicy(spaces.Box(-np.inf, np.inf, shape=(5,), dtype=np.float64), BOX)
    batched = make_batched_policy(policy, 1)
    weights = flat_weights(policy, rng)
    batched.load(0, weights)
    observations = rng.normal(0.0, 3.0, (1, 5))
    with th.no_grad():
        np.testing.assert_allclose(batched.act(observations, [0]), predict(policy, weights, observations), rtol=1e-6)


def test_image_observations_take_the_torch_path() -> None:
    """SB3 scales image observations by 1/255 before the network: the numpy kernel leaves those to torch."""
    rng = np.random.default_rng(4)
    image_space = spaces.Box(0, 255, shape=(4, 4, 3), dtype=np.uint8)
    policy = ActorCriticPolicy(image_space, BOX, constant, net_arch=[8])
    batched = make_batched_policy(policy, 1)
    assert isinstance(batched, TorchPolicyCopies)
    weights = flat_weights(policy, rng)
    batched.load(0, weights)
    observations = rng.integers(0, 256, size=(1, 4, 4, 3), dtype=np.uint8)
    np.testing.assert_array_equal(batched.act(observations, [0]), predict(policy, weights, observations))


class DirectPolicy(BasePolicy):
    """``action_net(features_extractor(obs))`` from a package the kernels know nothing of; ``sign`` flips it."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Box, sign: float = 1.0) -> None:
        super().__init__(observation_space, action_space)
        self.features_extractor = self.make_features_extractor()
        self.action_net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        self.sign = sign

    def forward(self, obs: th.Tensor, deterministic: bool = True) -> th.Tensor:
        return self.sign * self.action_net(self.extract_features(obs, self.features_extractor))

    def _predict(self, observation: th.Tensor, deterministic: bool = True) -> th.Tensor:
        return self(observation)


def test_layouts_are_recognised_by_their_modules_and_checked_against_predict() -> None:
    """A policy of the ARS layout takes the numpy path whatever defines it; a lookalike that computes something else
    from the same modules takes the torch path."""
    rng = np.random.default_rng(5)
    direct = DirectPolicy(OBSERVATION_SPACE, BOX)
    batched = make_batched_policy(direct, 2)
    assert isinstance(batched, NumpyMlpPolicy)
    weights = flat_weights(direct, rng)
    batched.load(0, weights)
    observations = rng.normal(0.0, 3.0, (2, 5)).astype(np.float32)
    np.testing.assert_allclose(
        batched.act(observations, [0, 1])[0], predict(direct, weights, observations[:1])[0], rtol=1e-5, atol=5e-5
    )
    flipped = DirectPolicy(OBSERVATION_SPACE, BOX, sign=-1.0)
    assert isinstance(make_batched_policy(flipped, 2), TorchPolicyCopies)


def test_a_layer_stack_with_shared_weights_computes_what_one_with_weights_per_row_does() -> None:
    rng = np.random.default_rng(3)
    policy = POLICIES["actor-critic-box"]()
    kernel = make_batched_policy(policy, 1)
    assert isinstance(kernel, NumpyMlpPolicy)
    layers = kernel.layout.layers
    weights = flat_weights(policy, rng)
    inputs = rng.normal(0.0, 2.0, (7, 5)).astype(np.float32)
    per_row = LayerStack(layers, 7)
    for row in range(7):
        per_row.load(weights, row)
    shared = LayerStack(layers, 2, shared_weights=True)  # grows to the batch
    shared.load(weights)
    np.testing.assert_allclose(shared.forward(inputs), per_row.forward(inputs), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(shared.forward(inputs[:3]), per_row.forward(inputs)[:3], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="8 inputs for a stack of 7 rows of weights"):
        per_row.forward(np.zeros((8, 5), np.float32))
