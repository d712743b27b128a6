"""What ``n_steps``, ``train_freq`` and callbacks count: an IndexableMultiEnv is one environment as Stable-Baselines3
sees it (as in async-gym-agents: ``n_steps`` is the whole rollout, callbacks are called once per transition); any
other VecEnv keeps Stable-Baselines3's meaning (``n_steps`` per environment, a callback step per VecEnv step)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from agents.agent_envs import OddEnv
from agents.helpers import EpisodeRecorder
from lit_sb3 import FactoryVecEnv, IndexableMultiEnv, get_injected_agent

N_ENVS, LENGTH = 8, 7  # OddEnv's episodes are 7 steps long


def odd_envs(kind: str) -> VecEnv:
    if kind == "IndexableMultiEnv":
        return IndexableMultiEnv([OddEnv] * N_ENVS)
    return FactoryVecEnv([OddEnv] * N_ENVS) if kind == "FactoryVecEnv" else DummyVecEnv([OddEnv] * N_ENVS)


def recorded_run(algorithm: type, env: VecEnv, total_timesteps: int, use_mp: bool, **kwargs: Any) -> Any:
    recorder = EpisodeRecorder()
    model = get_injected_agent(algorithm)("MlpPolicy", env, use_mp=use_mp, seed=0, **kwargs)
    try:
        model.learn(total_timesteps, callback=recorder)
    finally:
        model.shutdown()
    return model, recorder


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
@pytest.mark.parametrize("reproducible", [False, True], ids=["free-running", "reproducible"])
def test_an_indexable_multi_env_is_one_environment_n_steps_is_the_rollout(use_mp: bool, reproducible: bool) -> None:
    env = odd_envs("IndexableMultiEnv")
    assert (env.num_envs, len(env)) == (1, N_ENVS)
    model, recorder = recorded_run(
        PPO, env, 64, use_mp, n_steps=64, batch_size=32, n_epochs=1, reproducible=reproducible
    )
    # One rollout of whole episodes from all eight environments: 64 steps, plus the end of the episodes under way.
    assert 64 <= model.num_timesteps < 64 + N_ENVS * LENGTH
    assert model.rollout_buffer.buffer_size == model.num_timesteps
    assert recorder.timesteps_at_step == list(range(1, model.num_timesteps + 1))  # a callback step per transition
    env_indices = {info["collection"]["env_index"] for info in recorder.finals}
    assert len(env_indices) > 1  # the rollout came from several of the environments, not one


@pytest.mark.parametrize("kind", ["DummyVecEnv", "FactoryVecEnv"])
def test_other_vec_envs_keep_stable_baselines3s_n_steps_per_environment(kind: str) -> None:
    model, recorder = recorded_run(PPO, odd_envs(kind), 64, False, n_steps=8, batch_size=32, n_epochs=1)
    # Exactly n_steps * n_envs, as in Stable-Baselines3: the episode that crosses it is cut there.
    assert model.num_timesteps == model.rollout_buffer.buffer_size == 8 * N_ENVS
    steps = recorder.timesteps_at_step
    assert steps[:3] == [N_ENVS, 2 * N_ENVS, 3 * N_ENVS]  # a callback step per VecEnv step of eight transitions


@pytest.mark.parametrize(("kind", "per_step"), [("IndexableMultiEnv", 1), ("DummyVecEnv", N_ENVS)])
def test_off_policy_steps_are_one_transition_on_an_indexable_multi_env(kind: str, per_step: int) -> None:
    model, recorder = recorded_run(SAC, odd_envs(kind), 48, False, learning_starts=16, batch_size=16)
    assert recorder.timesteps_at_step == list(range(per_step, 48 + 1, per_step))
    assert model.num_timesteps == 48 == model.replay_buffer.size()


def test_eval_freq_counts_transitions_on_an_indexable_multi_env(tmp_path: pathlib.Path) -> None:
    evaluation = EvalCallback(
        DummyVecEnv([lambda: Monitor(OddEnv())]), eval_freq=20, n_eval_episodes=1, log_path=str(tmp_path), verbose=0
    )
    model = get_injected_agent(PPO)(
        "MlpPolicy", odd_envs("IndexableMultiEnv"), n_steps=20, batch_size=20, n_epochs=1, use_mp=False, seed=0
    )
    try:
        model.learn(60, callback=evaluation)
    finally:
        model.shutdown()
    assert list(evaluation.evaluations_timesteps) == list(range(20, model.num_timesteps + 1, 20))
    assert len(evaluation.evaluations_timesteps) >= 3


def test_an_indexable_multi_env_addresses_every_environment_it_holds() -> None:
    env = IndexableMultiEnv([OddEnv] * 3)
    assert env.get_attr("length") == [LENGTH] * 3
    env.set_attr("length", 4, indices=[1])
    assert env.get_attr("length") == [LENGTH, 4, LENGTH]
    assert env.env_method("reset", indices=2)[0][0].tolist() == [0.0]
    assert env.envs == [env.environments[0]]  # stepped as a VecEnv: environment 0
    stub = OddEnv(length=2)
    assert IndexableMultiEnv([OddEnv] * 2, stub_env=stub).envs == [stub]


def test_an_indexable_multi_env_refuses_factories_of_vec_envs() -> None:
    with pytest.raises(TypeError, match=r"env_fns\[0\]\(\) returned DummyVecEnv, not a gymnasium Env"):
        IndexableMultiEnv([lambda: DummyVecEnv([OddEnv])])
