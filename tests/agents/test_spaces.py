"""Every space Stable-Baselines3 supports, collected asynchronously: Dict observations (MultiInputPolicy),
MultiDiscrete and MultiBinary spaces, and HerReplayBuffer, with worker threads and worker processes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3 import A2C, PPO, SAC, HerReplayBuffer
from stable_baselines3.common.buffers import DictReplayBuffer, DictRolloutBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import BitFlippingEnv
from stable_baselines3.common.vec_env import VecNormalize

from agents.agent_envs import CueEnv
from lit_sb3.agents.async_agent import get_injected_agent

MODES = pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])


def _cue_env(observation: str, action: str, n_envs: int = 2) -> Any:
    return make_vec_env(CueEnv, n_envs, env_kwargs={"observation": observation, "action": action})


def test_ppo_with_dict_observations_learns_multi_discrete_actions() -> None:
    """Random actions score 0.5 a step; naming both bits of the cue scores 1."""
    model = get_injected_agent(PPO)(
        "MultiInputPolicy", _cue_env("dict", "multi_discrete"), n_steps=64, batch_size=64, ent_coef=0.0, seed=0
    )
    try:
        model.learn(4_000)
    finally:
        model.shutdown()
    env = CueEnv("dict", "multi_discrete")
    observation, _ = env.reset(seed=1)
    rewards = []
    for _ in range(200):
        action, _ = model.predict(observation, deterministic=True)
        observation, reward, _, truncated, _ = env.step(action)
        rewards.append(reward)
        if truncated:
            observation, _ = env.reset()
    assert np.mean(rewards) > 0.9


@pytest.mark.parametrize(
    ("algorithm", "observation", "action", "use_mp"),
    [
        (PPO, "dict", "multi_binary", False),
        (A2C, "dict", "discrete", True),
        (PPO, "multi_binary", "multi_discrete", True),
        (A2C, "multi_binary", "box", False),
    ],
    ids=[
        "ppo-dict-multibinary-threads",
        "a2c-dict-discrete-processes",
        "ppo-multibinary-multidiscrete-processes",
        "a2c-multibinary-box-threads",
    ],
)
def test_on_policy_rollouts_hold_each_step_of_every_space(
    algorithm: type, observation: str, action: str, use_mp: bool
) -> None:
    """Each stored observation (every key), action and reward belong to the same step: the reward is recomputed."""
    policy = "MultiInputPolicy" if observation == "dict" else "MlpPolicy"
    model = get_injected_agent(algorithm)(policy, _cue_env(observation, action), n_steps=16, use_mp=use_mp, seed=0)
    try:
        model.learn(32)
    finally:
        model.shutdown()
    buffer = model.rollout_buffer  # as training left it: one row per step
    length = buffer.buffer_size
    assert length >= 32 and length % 8 == 0  # whole episodes of 8 steps
    cues = buffer.observations["cue"] if observation == "dict" else buffer.observations
    env = CueEnv(observation, action)
    rewards = [env.reward(cue, taken) for cue, taken in zip(cues, _taken_actions(model), strict=True)]
    inside = np.arange(length) % 8 != 7  # the last reward of a truncated episode has the bootstrap added
    np.testing.assert_allclose(buffer.rewards[inside, 0], np.asarray(rewards)[inside], atol=1e-6)
    if observation == "dict":
        assert isinstance(buffer, DictRolloutBuffer)
        np.testing.assert_array_equal(buffer.observations["t"][:, 0], np.arange(length) % 8)
        np.testing.assert_array_equal(buffer.episode_starts[:, 0], np.arange(length) % 8 == 0)


def _taken_actions(model: Any) -> np.ndarray:
    """:return: The rollout's actions as the environments took them (stored as floats; Box ones before clipping)."""
    actions = model.rollout_buffer.actions
    space = model.action_space
    if isinstance(space, spaces.Box):
        return np.clip(actions, space.low, space.high)
    return actions[:, 0].astype(np.int64) if isinstance(space, spaces.Discrete) else actions.astype(np.int64)


@MODES
def test_sac_with_dict_observations_stores_whole_transitions_and_normalises_one_key(use_mp: bool) -> None:
    """VecNormalize over the ``t`` key only: the replay buffer keeps raw observations, the statistics count what
    was consumed, key by key."""
    env = VecNormalize(_cue_env("dict", "box"), norm_obs_keys=["t"], norm_reward=False)
    model = get_injected_agent(SAC)(
        "MultiInputPolicy", env, learning_starts=16, train_freq=8, batch_size=16, use_mp=use_mp, seed=0
    )
    try:
        model.learn(48)
    finally:
        model.shutdown()
    buffer = model.replay_buffer
    assert isinstance(buffer, DictReplayBuffer)
    stored = buffer.pos
    assert stored == 48
    steps = buffer.observations["t"][:stored, 0, 0]
    np.testing.assert_array_equal(steps, np.arange(stored) % 8)  # raw, episode after episode
    np.testing.assert_array_equal(buffer.next_observations["t"][:stored, 0, 0], steps + 1)
    cues, actions = buffer.observations["cue"][:stored, 0], buffer.actions[:stored, 0]
    expected = [CueEnv("dict", "box").reward(cue, action) for cue, action in zip(cues, actions, strict=True)]
    np.testing.assert_allclose(buffer.rewards[:stored, 0], expected, atol=1e-6)
    np.testing.assert_array_equal(buffer.timeouts[:stored, 0], steps == 7)
    assert isinstance(env.obs_rms, dict) and set(env.obs_rms) == {"t"}
    # Counted: the two first observations (learn() resets the VecNormalize, as in Stable-Baselines3), then the
    # observations of every step consumed; the initial count is epsilon.
    assert env.obs_rms["t"].count == pytest.approx(2 + stored + 1e-4)
    np.testing.assert_allclose(env.obs_rms["t"].mean, [3.5 * stored / (2 + stored)], atol=1e-4)


@MODES
def test_her_replay_buffer_takes_whole_episodes_and_relabels_goals_through_the_env(use_mp: bool) -> None:
    """Two environments, one buffer column: episodes go in one after the other, each with its start and length,
    and relabelled samples get rewards from the environment's ``compute_reward``."""
    env = make_vec_env(BitFlippingEnv, 2, env_kwargs={"n_bits": 4, "continuous": True})
    model = get_injected_agent(SAC)(
        "MultiInputPolicy",
        env,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs={"n_sampled_goal": 4, "goal_selection_strategy": "future"},
        learning_starts=40,
        train_freq=4,
        batch_size=32,
        use_mp=use_mp,
        seed=0,
    )
    try:
        model.learn(80)
    finally:
        model.shutdown()
    buffer = model.replay_buffer
    assert isinstance(buffer, HerReplayBuffer) and buffer.n_envs == 1 and buffer.env is model.get_env()
    stored = buffer.pos
    ends = np.flatnonzero(buffer.dones[:stored, 0])
    starts = np.concatenate([[0], ends[:-1] + 1])
    for start, end in zip(starts, ends, strict=True):
        assert (buffer.ep_start[start : end + 1, 0] == start).all()
        assert (buffer.ep_length[start : end + 1, 0] == end + 1 - start).all()
    assert (buffer.ep_length[ends[-1] + 1 : stored, 0] == 0).all()  # an episode under way is not sampled
    np.random.seed(0)
    samples = buffer.sample(256)
    achieved = samples.next_observations["achieved_goal"].numpy()
    desired = samples.observations["desired_goal"].numpy()
    expected = env.env_method("compute_reward", achieved, desired, [{}] * len(achieved), indices=[0])[0]
    np.testing.assert_array_equal(samples.rewards.numpy()[:, 0], expected)
    assert (expected == 0).any()  # some relabelled goals were reached
