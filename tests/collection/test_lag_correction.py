"""Rollouts of complete episodes: their returns and advantages, and their re-evaluation by the trainer's policy."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy

from lit_sb3.collection.lag_correction import (
    DECOUPLE_ABOVE,
    MAX_IMPORTANCE_WEIGHT,
    STALE_RATIO,
    correct_for_policy_lag,
)
from lit_sb3.collection.rollout import fill_returns_and_advantages

LENGTH = 600


def episode_starts(rng: np.random.Generator, length: int) -> np.ndarray:
    """:return: Where the episodes of a rollout begin (the first at 0, lengths 1 to 80)."""
    starts = np.cumsum(rng.integers(1, 80, size=length))
    return np.r_[0, starts[starts < length]]


def filled_buffer(policy: ActorCriticPolicy, seed: int) -> RolloutBuffer | DictRolloutBuffer:
    """:return: A rollout of complete episodes acted by ``policy`` on random observations (values, log-probs)."""
    rng = np.random.default_rng(seed)
    observation_space, action_space = policy.observation_space, policy.action_space
    observation_space.seed(seed)
    kwargs = {"gamma": 0.97, "gae_lambda": 0.9, "n_envs": 1}
    buffer: RolloutBuffer | DictRolloutBuffer
    if isinstance(observation_space, spaces.Dict):
        buffer = DictRolloutBuffer(LENGTH, observation_space, action_space, **kwargs)
    else:
        buffer = RolloutBuffer(LENGTH, observation_space, action_space, **kwargs)
    samples = [observation_space.sample() for _ in range(LENGTH)]
    if isinstance(buffer.observations, dict):
        for key, column in buffer.observations.items():
            column[:, 0] = np.stack([sample[key] for sample in samples]).reshape(column[:, 0].shape)
        tensors = {key: th.as_tensor(column[:, 0]) for key, column in buffer.observations.items()}
    else:
        buffer.observations[:, 0] = np.stack(samples).reshape(buffer.observations[:, 0].shape)
        tensors = th.as_tensor(buffer.observations[:, 0])  # type: ignore[assignment]
    with th.no_grad():
        actions, values, log_probs = policy(tensors)
    buffer.actions[:, 0] = actions.numpy().reshape(LENGTH, -1)
    buffer.values[:, 0] = values.flatten().numpy()
    buffer.log_probs[:, 0] = log_probs.numpy()
    buffer.rewards[:, 0] = rng.normal(size=LENGTH)
    buffer.episode_starts[episode_starts(rng, LENGTH), 0] = 1.0
    buffer.pos, buffer.full = LENGTH, True
    return buffer


def make_policy(observation_space: spaces.Space, action_space: spaces.Space) -> ActorCriticPolicy:
    policy_class = MultiInputActorCriticPolicy if isinstance(observation_space, spaces.Dict) else ActorCriticPolicy
    return policy_class(observation_space, action_space, lambda _: 1e-3)


SPACES = {
    "box-discrete": (spaces.Box(-1, 1, (4,)), spaces.Discrete(3)),
    "box-box": (spaces.Box(-1, 1, (3,)), spaces.Box(-2, 2, (2,))),
    "dict-multidiscrete": (
        spaces.Dict({"position": spaces.Box(-1, 1, (2,)), "goal": spaces.Box(-1, 1, (3,))}),
        spaces.MultiDiscrete([2, 3]),
    ),
}


@pytest.mark.parametrize("seed", range(3))
def test_returns_and_advantages_are_stable_baselines3s(seed: int) -> None:
    th.manual_seed(seed)
    buffer = filled_buffer(make_policy(*SPACES["box-discrete"]), seed)
    buffer.compute_returns_and_advantage(last_values=th.zeros(1), dones=np.ones(1))
    expected_advantages, expected_returns = buffer.advantages.copy(), buffer.returns.copy()
    buffer.advantages[:], buffer.returns[:] = np.nan, np.nan
    fill_returns_and_advantages(buffer)
    np.testing.assert_allclose(buffer.advantages, expected_advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(buffer.returns, expected_returns, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spaces_", SPACES.values(), ids=SPACES.keys())
def test_a_rollout_acted_by_the_trainers_weights_is_left_as_it_is(spaces_: tuple[spaces.Space, spaces.Space]) -> None:
    th.manual_seed(0)
    policy = make_policy(*spaces_)
    buffer = filled_buffer(policy, 0)
    fill_returns_and_advantages(buffer)
    before = {name: getattr(buffer, name).copy() for name in ("values", "log_probs", "advantages", "returns")}
    weights = correct_for_policy_lag(policy, buffer, "decoupled")
    assert weights is not None
    np.testing.assert_allclose(weights, 1.0, rtol=1e-5)
    for name, expected in before.items():
        np.testing.assert_allclose(getattr(buffer, name), expected, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("spaces_", SPACES.values(), ids=SPACES.keys())
def test_a_rollout_acted_by_older_weights_is_reevaluated_and_weighted(
    spaces_: tuple[spaces.Space, spaces.Space],
) -> None:
    th.manual_seed(0)
    acting, trainer = make_policy(*spaces_), make_policy(*spaces_)  # two draws of the weights: far apart
    buffer = filled_buffer(acting, 1)
    behaviour_log_probs = buffer.log_probs[:, 0].copy()
    weights = correct_for_policy_lag(trainer, buffer, "decoupled")
    assert weights is not None
    reference = filled_buffer(trainer, 1)  # the same observations and rewards, the trainer's values
    with th.no_grad():
        observations = (
            {key: th.as_tensor(column[:, 0]) for key, column in buffer.observations.items()}
            if isinstance(buffer.observations, dict)
            else th.as_tensor(buffer.observations[:, 0])
        )
        actions = th.as_tensor(buffer.actions[:, 0])
        if isinstance(trainer.action_space, spaces.Discrete):
            actions = actions.long().flatten()
        values, log_probs, _ = trainer.evaluate_actions(observations, actions)  # type: ignore[arg-type]
    np.testing.assert_allclose(buffer.values[:, 0], values.flatten().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(buffer.log_probs[:, 0], log_probs.numpy(), rtol=1e-5, atol=1e-6)
    expected_weights = np.minimum(np.exp(log_probs.numpy().astype(np.float64) - behaviour_log_probs), 2.0)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5)
    assert weights.max() <= MAX_IMPORTANCE_WEIGHT and not np.allclose(weights, 1.0)
    reference.values[:, 0] = buffer.values[:, 0]
    fill_returns_and_advantages(reference)
    np.testing.assert_allclose(buffer.returns, reference.returns, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(buffer.advantages[:, 0], reference.advantages[:, 0] * weights, rtol=1e-5, atol=1e-5)


def test_the_policy_is_evaluated_in_eval_mode_without_gradients() -> None:
    policy = make_policy(*SPACES["box-box"])
    policy.set_training_mode(True)
    buffer = filled_buffer(policy, 0)
    correct_for_policy_lag(policy, buffer, "decoupled")
    assert not policy.training
    assert all(parameter.grad is None for parameter in policy.parameters())


def test_the_values_correction_recomputes_values_returns_and_advantages_only() -> None:
    th.manual_seed(0)
    acting, trainer = make_policy(*SPACES["box-box"]), make_policy(*SPACES["box-box"])
    buffer = filled_buffer(acting, 3)
    behaviour_log_probs = buffer.log_probs.copy()
    assert correct_for_policy_lag(trainer, buffer, "values") is None
    with th.no_grad():
        expected_values = trainer.predict_values(th.as_tensor(buffer.observations[:, 0])).flatten().numpy()
    np.testing.assert_allclose(buffer.values[:, 0], expected_values, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(buffer.log_probs, behaviour_log_probs)
    advantages, returns = buffer.advantages.copy(), buffer.returns.copy()
    buffer.compute_returns_and_advantage(last_values=th.zeros(1), dones=np.ones(1))
    np.testing.assert_allclose(advantages, buffer.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(returns, buffer.returns, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spaces_", SPACES.values(), ids=SPACES.keys())
def test_auto_decouples_continuous_actions_only_where_the_trainers_policy_moved_far_from_the_acting_one(
    spaces_: tuple[spaces.Space, spaces.Space],
) -> None:
    th.manual_seed(0)
    acting, trainer = make_policy(*spaces_), make_policy(*spaces_)
    with th.no_grad():  # the action head starts near-uniform: moved so that the two policies differ
        for parameter in trainer.action_net.parameters():
            parameter.add_(th.randn_like(parameter))
    near = filled_buffer(trainer, 2)
    near_log_probs = near.log_probs.copy()
    assert correct_for_policy_lag(trainer, near, "auto") is None
    np.testing.assert_array_equal(near.log_probs, near_log_probs)

    far = filled_buffer(acting, 2)
    behaviour = copy.deepcopy(far)
    weights = correct_for_policy_lag(trainer, far, "auto")
    continuous = isinstance(trainer.action_space, spaces.Box)
    assert (weights is not None) == continuous
    expected = copy.deepcopy(behaviour)
    if continuous:
        ratios = np.exp(far.log_probs[:, 0] - behaviour.log_probs[:, 0].astype(np.float64))
        assert np.mean(np.abs(ratios - 1) > STALE_RATIO) > DECOUPLE_ABOVE
        correct_for_policy_lag(trainer, expected, "decoupled")
    else:
        correct_for_policy_lag(trainer, expected, "values")
    for name in ("values", "log_probs", "advantages", "returns"):
        np.testing.assert_array_equal(getattr(far, name), getattr(expected, name), err_msg=name)


def test_auto_keeps_the_acting_log_probabilities_while_few_samples_are_stale() -> None:
    th.manual_seed(0)
    policy = make_policy(*SPACES["box-box"])
    buffer = filled_buffer(policy, 4)
    stale = np.arange(LENGTH) < int(DECOUPLE_ABOVE * LENGTH)  # exactly the share that is still tolerated
    buffer.log_probs[stale, 0] -= 1.0  # pi_trainer / pi_acting = e for these
    values_only = copy.deepcopy(buffer)
    assert correct_for_policy_lag(policy, buffer, "auto") is None
    correct_for_policy_lag(policy, values_only, "values")
    for name in ("values", "log_probs", "advantages", "returns"):
        np.testing.assert_array_equal(getattr(buffer, name), getattr(values_only, name), err_msg=name)
    buffer.log_probs[int(DECOUPLE_ABOVE * LENGTH), 0] -= 1.0  # one more stale sample
    assert correct_for_policy_lag(policy, buffer, "auto") is not None
