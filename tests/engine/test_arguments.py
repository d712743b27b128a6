"""Bad input is refused before any work starts, with an error naming the argument."""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import pytest
from stable_baselines3 import PPO, SAC

from engine.helpers import small_ppo_engine
from lit_sb3.engine import (
    AsyncRLEngine,
    DataBuffer,
    EngineConfig,
    EnvGroup,
    PolicyGroup,
    ReplayData,
    RolloutQueue,
    SyncRLEngine,
)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "exactly one of total_env_steps and train_epochs"),
        ({"total_env_steps": 10, "train_epochs": 10}, "exactly one of total_env_steps and train_epochs"),
        ({"total_env_steps": 0}, "total_env_steps must be at least 1"),
        ({"total_env_steps": 10, "batch_size": 0}, "batch_size"),
        ({"total_env_steps": 10, "max_policy_lag": -1}, "max_policy_lag"),
        ({"total_env_steps": 10, "replay_ratio": 0}, "replay_ratio"),
        ({"total_env_steps": 10, "replay_ratio": float("inf")}, "replay_ratio must be a finite number, got inf"),
        ({"total_env_steps": 10, "weight_sync_interval": float("inf")}, "weight_sync_interval must be a finite"),
        ({"total_env_steps": 10, "weight_sync_interval": -1}, "weight_sync_interval"),
        ({"total_env_steps": 10, "eval_episodes": 0}, "eval_episodes"),
        ({"total_env_steps": 10, "checkpoint_interval": 5}, "checkpoint_interval needs a checkpoint_folder"),
        ({"total_env_steps": 10, "seed": -3}, "seed"),
        ({"total_env_steps": 10, "log_formats": ("stdout", "xml")}, "log_formats"),
        ({"total_env_steps": 10, "log_formats": "stdout"}, r"log_formats must be a tuple of \['csv', "),
        ({"total_env_steps": 10, "log_formats": True}, r"log_formats must be a tuple of \['csv', "),
        ({"total_env_steps": 10, "log_formats": ("csv",)}, "give a log_folder"),
    ],
)
def test_a_bad_config_names_the_argument(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig(**fields)


def test_a_config_value_of_the_wrong_type_names_the_argument() -> None:
    with pytest.raises(TypeError, match="train_epochs must be an int"):
        EngineConfig(train_epochs=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_policy_lag must be an int"):
        EngineConfig(train_epochs=2, max_policy_lag=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="weight_sync_interval must be a number"):
        EngineConfig(train_epochs=2, weight_sync_interval="0.1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"checkpoint_folder must be a path \(str or os.PathLike\) or None, got True"):
        EngineConfig(train_epochs=2, checkpoint_folder=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="log_folder must be a path"):
        EngineConfig(train_epochs=2, log_folder=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"verbose must be a bool \(or an int, as Stable-Baselines3's\), got '2'"):
        EngineConfig(train_epochs=2, verbose="2")  # type: ignore[arg-type]


def test_a_bad_env_group_names_the_argument() -> None:
    env_fns = [partial(gym.make, "CartPole-v1")]
    with pytest.raises(ValueError, match="backend must be one of"):
        EnvGroup(env_fns, backend="cluster")
    with pytest.raises(ValueError, match="n_workers"):
        EnvGroup(env_fns, n_workers=0)
    with pytest.raises(ValueError, match="n_workers=3 is more than the 2 environments to collect from"):
        EnvGroup(env_fns * 2, n_workers=3)
    with pytest.raises(ValueError, match=r"environment 1 has other spaces .* than environment 0"):
        EnvGroup([*env_fns, partial(gym.make, "Acrobot-v1")])
    with pytest.raises(TypeError, match=r"env_fns\[0\]\(\) returned int, not a gymnasium Env"):
        EnvGroup([lambda: 3])
    with pytest.raises(ValueError, match="max_restarts"):
        EnvGroup(env_fns, max_restarts=-1)
    with pytest.raises(TypeError, match="env_fns"):
        EnvGroup("CartPole-v1")  # type: ignore[arg-type]


def test_the_parts_must_fit_together() -> None:
    group = EnvGroup([partial(gym.make, "CartPole-v1")], backend="threads")
    model = PPO("MlpPolicy", group.env, n_steps=16, batch_size=16)
    config = EngineConfig(total_env_steps=100)
    with pytest.raises(TypeError, match="policy_group must be a PolicyGroup"):
        AsyncRLEngine(config, group, model, RolloutQueue())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="buffer must be a RolloutQueue for PPO"):
        SyncRLEngine(config, group, PolicyGroup(model), ReplayData(SAC("MlpPolicy", "Pendulum-v1").replay_buffer))  # type: ignore[arg-type]
    pendulum = EnvGroup([partial(gym.make, "Pendulum-v1")], backend="threads")
    with pytest.raises(ValueError, match="spaces"):
        AsyncRLEngine(config, pendulum, PolicyGroup(model), DataBuffer.for_algorithm(model))
    with pytest.raises(TypeError, match="algorithm must be a Stable-Baselines3"):
        PolicyGroup("PPO")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lag_correction must be one of"):
        PolicyGroup(model, lag_correction=True)  # type: ignore[arg-type]
    sac = SAC("MlpPolicy", "Pendulum-v1")
    with pytest.raises(ValueError, match=r"lag_correction is for on-policy algorithms .* got None"):
        PolicyGroup(sac, lag_correction=None)
    for kept in ("auto", "values"):  # the default, and the default before it: off-policy, nothing to correct
        assert PolicyGroup(sac, lag_correction=kept).lag_correction == kept
    never_trains = SAC("MlpPolicy", "Pendulum-v1", gradient_steps=0)
    with pytest.raises(ValueError, match="gradient_steps=0 never trains: give the algorithm gradient_steps or"):
        AsyncRLEngine(
            EngineConfig(total_env_steps=100), pendulum, PolicyGroup(never_trains), ReplayData(sac.replay_buffer)
        )


def test_a_spent_budget_is_refused_before_the_workers_start() -> None:
    engine = small_ppo_engine(AsyncRLEngine, total_env_steps=None, train_epochs=1)
    engine.run()
    with pytest.raises(ValueError, match="budget of the config is spent"):
        engine.run()


def test_a_missing_checkpoint_names_the_folder(tmp_path: Any) -> None:
    engine = small_ppo_engine(SyncRLEngine)
    with pytest.raises(FileNotFoundError, match="is not a checkpoint"):
        engine.load_checkpoint(tmp_path)


def test_a_checkpoint_folder_that_cannot_be_made_is_refused_before_the_run(tmp_path: Any) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"checkpoint_folder '.*file/checkpoints' cannot be created"):
        small_ppo_engine(AsyncRLEngine, checkpoint_interval=1, checkpoint_folder=tmp_path / "file" / "checkpoints")
    small_ppo_engine(AsyncRLEngine, checkpoint_interval=1, checkpoint_folder=tmp_path / "new" / "checkpoints")
    assert (tmp_path / "new" / "checkpoints").is_dir()
