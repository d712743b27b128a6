"""Rollouts that cut an episode: the cut part is bootstrapped as Stable-Baselines3 bootstraps a rollout's end, the
rest begins the next rollout, and VecNormalize's statistics count each step once, in order."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from lit_sb3.collection.episodes import EpisodePacket
from lit_sb3.collection.rollout import EpisodeSegment, Rollout, RolloutSpec, build_rollout
from lit_sb3.collection.statistics import NormalizationStatistics

GAMMA, LAMBDA = 0.97, 0.9
OBSERVATION_SPACE, ACTION_SPACE = spaces.Box(-5, 5, (3,)), spaces.Discrete(2)


def episode(rng: np.random.Generator, env_index: int, length: int, *, truncated: bool) -> EpisodePacket:
    """:return: An on-policy episode of random observations, rewards, values and log-probabilities."""
    rewards = rng.normal(size=length).astype(np.float32)
    terminal_value = float(rng.normal()) if truncated else 0.0
    train_rewards = rewards.copy()
    train_rewards[-1] += GAMMA * terminal_value
    return EpisodePacket(
        env_index=env_index,
        episode_index=0,
        observations=rng.normal(size=(length + 1, 3)).astype(np.float32),
        acted_observations=None,
        actions=rng.integers(0, 2, size=length),
        rewards=rewards,
        train_rewards=train_rewards,
        terminal_value=terminal_value,
        values=rng.normal(size=length).astype(np.float32),
        log_probs=rng.normal(size=length).astype(np.float32),
        terminated=not truncated,
        truncated=truncated,
        infos=[{"step": step} for step in range(length)],
        random_steps=0,
        first_version=0,
        last_version=0,
        seconds=0.0,
    )


def rollout_of(segments: list[EpisodeSegment]) -> Rollout:
    spec = RolloutSpec(sum(segment.length for segment in segments), GAMMA, LAMBDA, "cpu", split_episodes=True)
    rewards = [
        segment.train_rewards(segment.packet.train_rewards[segment.start : segment.stop], GAMMA) for segment in segments
    ]
    return build_rollout(
        segments, rewards, spec, observation_space=OBSERVATION_SPACE, action_space=ACTION_SPACE, started_at=0.0
    )


@pytest.mark.parametrize("seed", range(3))
def test_the_cut_part_of_an_episode_is_bootstrapped_as_stable_baselines3_ends_a_rollout(seed: int) -> None:
    rng = np.random.default_rng(seed)
    whole, crossing = episode(rng, 0, 7, truncated=False), episode(rng, 1, 12, truncated=True)
    cut = int(rng.integers(1, 11))
    head, tail = EpisodeSegment.whole(crossing).split(cut)
    rollout = rollout_of([EpisodeSegment.whole(whole), head])

    # Stable-Baselines3's buffer, one env column: the episode that ends, then the cut one, bootstrapped at its end
    # with the value of the observation at the cut (its episode goes on: not done).
    reference = RolloutBuffer(7 + cut, OBSERVATION_SPACE, ACTION_SPACE, gamma=GAMMA, gae_lambda=LAMBDA, n_envs=1)
    reference.rewards[:, 0] = np.r_[whole.rewards, crossing.rewards[:cut]]
    reference.values[:, 0] = np.r_[whole.values, crossing.values[:cut]]
    reference.episode_starts[[0, 7], 0] = 1.0
    reference.pos, reference.full = 7 + cut, True
    reference.compute_returns_and_advantage(th.tensor([crossing.values[cut]]), np.zeros(1))
    np.testing.assert_allclose(rollout.buffer.advantages, reference.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rollout.buffer.returns, reference.returns, rtol=1e-5, atol=1e-5)
    assert rollout.dones.tolist() == [False] * 6 + [True] + [False] * cut  # no episode ends at the cut
    assert [info.get("step") for info in rollout.infos[7:]] == list(range(cut))
    assert "episode" not in rollout.infos[-1] and rollout.episodes == [whole]  # the cut one has not ended

    # The rest begins the next rollout and ends the episode, its time-limit bootstrap included.
    following = rollout_of([tail, EpisodeSegment.whole(episode(rng, 2, 5, truncated=False))])
    np.testing.assert_array_equal(following.buffer.observations[: tail.length, 0], crossing.observations[cut:-1])
    np.testing.assert_array_equal(following.new_observations[: tail.length], crossing.observations[cut + 1 :])
    np.testing.assert_array_equal(following.buffer.rewards[: tail.length, 0], crossing.train_rewards[cut:])
    assert following.dones[tail.length - 1] and following.episodes[0] is crossing
    final = following.infos[tail.length - 1]
    assert final["episode"]["l"] == 12 and final["episode"]["r"] == pytest.approx(float(crossing.rewards.sum()))


def test_counting_an_episode_in_two_parts_gives_vec_normalizes_statistics_of_the_whole() -> None:
    rng = np.random.default_rng(0)
    packet = episode(rng, 0, 30, truncated=False)
    in_parts, at_once = (
        NormalizationStatistics(VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]), gamma=GAMMA))
        for _ in range(2)
    )
    first = in_parts.count(packet, 0, 11)
    second = in_parts.count(packet, 11)
    assert first is not None and second is not None and len(first) + len(second) == 30
    at_once.count(packet)
    for name in ("obs_rms", "ret_rms"):
        parts, whole = getattr(in_parts.normalize, name), getattr(at_once.normalize, name)
        assert parts.count == whole.count
        np.testing.assert_allclose(parts.mean, whole.mean, rtol=1e-6)
        np.testing.assert_allclose(parts.var, whole.var, rtol=1e-6)
