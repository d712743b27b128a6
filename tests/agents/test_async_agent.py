"""get_injected_agent: the seed's API, every supported algorithm in both modes, and what it refuses."""

from __future__ import annotations

import re
import threading
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import sb3_contrib
import torch as th
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import DummyVecEnv

from agents.helpers import EpisodeRecorder, multi_env
from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.envs.multi_env import IndexableMultiEnv

CONTINUOUS = [PPO, A2C, SAC, TD3, DDPG, sb3_contrib.TQC, sb3_contrib.TRPO]
DISCRETE = [PPO, A2C, DQN, sb3_contrib.QRDQN, sb3_contrib.TRPO]


def small_kwargs(algorithm: type[BaseAlgorithm]) -> dict:
    if issubclass(algorithm, PPO | A2C | sb3_contrib.TRPO):
        return {"n_steps": 16, **({"batch_size": 32} if algorithm is not A2C else {})}
    return {"learning_starts": 50, "batch_size": 32, "buffer_size": 1000}


def policy_weights(model: BaseAlgorithm) -> np.ndarray:
    return th.nn.utils.parameters_to_vector(model.policy.parameters()).detach().numpy().copy()


def test_the_seed_usage_example_runs_as_written() -> None:
    env = IndexableMultiEnv([partial(gym.make, "Pendulum-v1") for _ in range(8)])
    model = get_injected_agent(TD3)(
        "MlpPolicy",
        env,
        use_mp=False,
        max_episodes_in_buffer=8,
    )
    model.learn(total_timesteps=10)
    model.shutdown()
    # As async-gym-agents counts (an IndexableMultiEnv is one environment): 10 transitions, all in the replay buffer;
    # no train step before learning_starts; nothing left running.
    assert env.num_envs == 1 and len(env) == 8
    assert model.num_timesteps == 10 == model.replay_buffer.size()
    assert model.get_profiler_report()["trainer"]["train_calls"] == 0
    assert [thread for thread in threading.enumerate() if thread.name.startswith("lit-sb3")] == []


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
@pytest.mark.parametrize("algorithm", CONTINUOUS, ids=lambda cls: cls.__name__)
def test_every_algorithm_collects_whole_episodes_and_trains_on_continuous_actions(
    algorithm: type[BaseAlgorithm], use_mp: bool
) -> None:
    recorder = EpisodeRecorder()
    model = get_injected_agent(algorithm)(
        "MlpPolicy", multi_env("Pendulum-v1", 2), use_mp=use_mp, seed=0, **small_kwargs(algorithm)
    )
    initial = policy_weights(model)
    try:
        model.learn(400, callback=recorder)
        report = model.get_profiler_report()
    finally:
        model.shutdown()
    assert model.num_timesteps >= 400
    assert report["trainer"]["train_calls"] > 0 and not np.array_equal(policy_weights(model), initial)
    assert len(recorder.finals) >= 2 and all(final["episode"]["l"] == 200 for final in recorder.finals)
    assert report["transport"]["backend"] == ("processes" if use_mp else "threads")


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
@pytest.mark.parametrize("algorithm", DISCRETE, ids=lambda cls: cls.__name__)
def test_every_algorithm_collects_and_trains_on_discrete_actions(algorithm: type[BaseAlgorithm], use_mp: bool) -> None:
    model = get_injected_agent(algorithm)(
        "MlpPolicy", multi_env("CartPole-v1", 2), use_mp=use_mp, seed=0, **small_kwargs(algorithm)
    )
    initial = policy_weights(model)
    try:
        model.learn(300)
        report = model.get_profiler_report()
    finally:
        model.shutdown()
    assert model.num_timesteps >= 300 and report["trainer"]["train_calls"] > 0
    assert not np.array_equal(policy_weights(model), initial)  # trained, not only collected
    assert sum(report["worker"]["episodes"]) > 0


def test_the_injected_class_is_a_subclass_with_the_seed_api() -> None:
    injected = get_injected_agent(PPO)
    assert issubclass(injected, PPO) and injected is get_injected_agent(PPO)
    model = injected("MlpPolicy", multi_env("CartPole-v1", 1), n_steps=32, batch_size=32, use_mp=False)
    try:
        model.learn(64)
        report = model.get_profiler_report()
        assert set(report) == {"trainer", "worker", "buffer", "transport", "policy"}
        assert 0.0 <= report["transport"]["utilization"] <= 1.0
        assert "avg_push_wait_seconds" in report["buffer"]
        assert not any("util" in key or "empty" in key for key in report["buffer"])  # no historical estimates
        assert {"lag_mean", "lag_p99", "lag_max"} <= set(report["policy"])
        assert {"episodes_dropped", "episodes_stale"} <= set(report["buffer"]) and "restarts" in report["worker"]
    finally:
        model.shutdown()
    model.shutdown()  # idempotent


def test_recurrent_and_maskable_ppo_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="RecurrentPPO is not supported by async collection: its LSTM states"):
        get_injected_agent(sb3_contrib.RecurrentPPO)
    with pytest.raises(ValueError, match="MaskablePPO is not supported by async collection: its action masks"):
        get_injected_agent(sb3_contrib.MaskablePPO)
    with pytest.raises(TypeError, match="needs a Stable-Baselines3 algorithm class"):
        get_injected_agent(dict)  # type: ignore[type-var]
    injected = get_injected_agent(PPO)
    assert get_injected_agent(injected) is injected  # injected once only


@pytest.mark.parametrize(
    ("total_timesteps", "error", "message"),
    [
        (-100, ValueError, "total_timesteps must be a non-negative number, got -100"),
        (float("nan"), ValueError, "total_timesteps must be a finite number, got nan"),
        ("300", TypeError, "total_timesteps must be a number, got <class 'str'>"),
        (None, TypeError, "total_timesteps must be a number, got <class 'NoneType'>"),
    ],
)
def test_a_bad_budget_is_refused_before_learn_starts_the_workers(
    total_timesteps: Any, error: type, message: str
) -> None:
    model = get_injected_agent(PPO)("MlpPolicy", multi_env("CartPole-v1", 1), n_steps=32, use_mp=True)
    with pytest.raises(error, match=re.escape(message)):
        model.learn(total_timesteps)
    assert model._collector is None


def test_bad_arguments_are_refused_before_any_work() -> None:
    injected = get_injected_agent(PPO)
    env = multi_env("CartPole-v1", 1)
    with pytest.raises(ValueError, match="max_episodes_in_buffer must be at least 1"):
        injected("MlpPolicy", env, max_episodes_in_buffer=0)
    with pytest.raises(ValueError, match="queue_put_timeout must be a non-negative number"):
        injected("MlpPolicy", env, queue_put_timeout=-1)
    with pytest.raises(TypeError, match="use_mp must be a bool"):
        injected("MlpPolicy", env, use_mp="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_policy_lag must be a non-negative int"):
        injected("MlpPolicy", env, max_policy_lag=-2)
    with pytest.raises(ValueError, match="weight_sync_interval must be a finite number, got inf"):
        injected("MlpPolicy", env, weight_sync_interval=float("inf"))
    with pytest.raises(ValueError, match=r"weight_sync_interval must be a non-negative number, got -0\.5"):
        injected("MlpPolicy", env, weight_sync_interval=-0.5)
    with pytest.raises(TypeError, match="reproducible must be a bool, got <class 'str'>"):
        injected("MlpPolicy", env, reproducible="no")  # type: ignore[arg-type]
    expected = r"lag_correction must be one of \('auto', 'values', 'decoupled'\) or None, got 'all'"
    with pytest.raises(ValueError, match=expected):
        injected("MlpPolicy", env, lag_correction="all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lag_correction is for on-policy algorithms .* got 'decoupled'"):
        get_injected_agent(SAC)("MlpPolicy", multi_env("Pendulum-v1", 1), lag_correction="decoupled")
    with pytest.raises(TypeError, match="env_fns must be a list of callables"):
        IndexableMultiEnv("CartPole-v1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"env_fns\[1\] must be callable"):
        IndexableMultiEnv([partial(gym.make, "CartPole-v1"), "CartPole-v1"])  # type: ignore[list-item]


def test_an_env_id_string_makes_a_one_env_agent() -> None:
    model = get_injected_agent(DQN)("MlpPolicy", "CartPole-v1", use_mp=False, learning_starts=10)
    try:
        model.learn(50)
    finally:
        model.shutdown()
    vec_env = model.get_env()
    assert isinstance(vec_env, DummyVecEnv) and vec_env.num_envs == 1 and model.num_timesteps >= 50


def test_save_and_load_keep_the_agent_usable(tmp_path: object) -> None:
    model = get_injected_agent(SAC)("MlpPolicy", multi_env("Pendulum-v1", 1), use_mp=False, learning_starts=10, seed=1)
    model.learn(60)
    model.save(f"{tmp_path}/sac")
    model.shutdown()
    loaded = get_injected_agent(SAC).load(f"{tmp_path}/sac", env=multi_env("Pendulum-v1", 1))
    observations = np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32)
    expected = model.predict(observations, deterministic=True)[0]
    np.testing.assert_array_equal(loaded.predict(observations, deterministic=True)[0], expected)
    try:
        loaded.learn(40, reset_num_timesteps=False)
    finally:
        loaded.shutdown()
    assert loaded.num_timesteps >= 100


def test_callbacks_see_the_rollout_buffer_trained_on() -> None:
    from stable_baselines3.common.callbacks import BaseCallback

    class BufferCheck(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[bool] = []

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            self.seen.append(self.locals["rollout_buffer"] is self.model.rollout_buffer)

    check = BufferCheck()
    model = get_injected_agent(A2C)("MlpPolicy", multi_env("CartPole-v1", 2), use_mp=False, n_steps=16, seed=0)
    try:
        model.learn(64, callback=check)
    finally:
        model.shutdown()
    assert len(check.seen) >= 2 and all(check.seen)
