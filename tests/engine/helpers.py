"""What the engine tests share: small engines on CartPole and Pendulum, and a check that nothing is left behind."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import gymnasium as gym
import psutil
from stable_baselines3 import PPO, SAC

from lit_sb3.engine import DataBuffer, EngineConfig, EnvGroup, PolicyGroup
from lit_sb3.engine.base import BaseEngine


def rl_zoo_ppo(env: Any, seed: int = 0) -> PPO:
    """rl-zoo's CartPole-v1 hyper-parameters (as the async agent's learning test)."""
    return PPO(
        "MlpPolicy",
        env,
        seed=seed,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=lambda progress: 0.001 * progress,
        clip_range=lambda progress: 0.2 * progress,
    )


def small_ppo_engine(engine_class: type[BaseEngine], backend: str = "threads", **config: Any) -> BaseEngine:
    """A PPO engine on 2 CartPoles whose train steps take milliseconds."""
    group = EnvGroup([partial(gym.make, "CartPole-v1") for _ in range(2)], backend=backend, n_workers=1)
    model = PPO("MlpPolicy", group.env, seed=0, n_steps=32, batch_size=64, n_epochs=1)
    config = {"total_env_steps": 2000, "seed": 0, "verbose": False, "log_formats": (), **config}
    return engine_class(EngineConfig(**config), group, PolicyGroup(model), DataBuffer.for_algorithm(model))


def small_sac_engine(engine_class: type[BaseEngine], backend: str = "threads", **config: Any) -> BaseEngine:
    """A SAC engine on one Pendulum with few gradient steps."""
    group = EnvGroup([partial(gym.make, "Pendulum-v1")], backend=backend, max_episodes_in_buffer=1)
    model = SAC("MlpPolicy", group.env, seed=0, learning_starts=200, batch_size=32, policy_kwargs={"net_arch": [16]})
    config = {"total_env_steps": 1000, "seed": 0, "verbose": False, "log_formats": (), "replay_ratio": 0.1, **config}
    return engine_class(EngineConfig(**config), group, PolicyGroup(model), DataBuffer.for_algorithm(model))


def engine_threads() -> list[threading.Thread]:
    """:return: Live threads of engines and of their worker pools."""
    return [thread for thread in threading.enumerate() if thread.name.startswith("lit-sb3")]


def worker_processes() -> list[psutil.Process]:
    """:return: Live grandchildren of this process: worker processes (children of the forkserver)."""
    workers = [worker for child in psutil.Process().children() for worker in child.children(recursive=True)]
    return [worker for worker in workers if worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE]
