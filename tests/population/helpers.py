"""Models and environments shared by the population-method tests."""

from __future__ import annotations

import sys

import cloudpickle
import gymnasium as gym
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecNormalize

from lit_sb3.population import ARS, CEM, CMAES, ES, PGPE, SNES, XNES, PopulationAlgorithm

# Worker processes cannot import this test module: its environment factories travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ALGORITHMS: list[type[PopulationAlgorithm]] = [ARS, ES, CEM, CMAES, PGPE, SNES, XNES]
#: Small populations: rounds of a few thousand CartPole steps at most.
SMALL = {
    ARS: {"n_delta": 4},
    ES: {"pop_size": 8},
    CEM: {"pop_size": 8},
    CMAES: {"pop_size": 8},
    PGPE: {"popsize": 8},
    SNES: {"popsize": 8},
    XNES: {"popsize": 8},
}


def cartpole_vec_env() -> VecEnv:
    return make_vec_env("CartPole-v1")


def short_cartpole_vec_env() -> VecEnv:
    """CartPole cut at 50 steps: rounds stay short once the policy balances."""
    return DummyVecEnv([lambda: gym.make("CartPole-v1", max_episode_steps=50)])


def normalized_pendulum_vec_env() -> VecEnv:
    """Pendulum cut at 20 steps, observations normalised (ARS V2)."""
    return VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=20)]), norm_reward=False)


def make_model(
    algorithm: type[PopulationAlgorithm], env: VecEnv | str = "CartPole-v1", **kwargs: object
) -> PopulationAlgorithm:
    """:return: ``algorithm`` with a LinearPolicy, seed 0 and a small population, unless ``kwargs`` say otherwise."""
    return algorithm("LinearPolicy", env, **{"seed": 0, **SMALL[algorithm], **kwargs})


class RoundEnds(BaseCallback):
    """Records ``num_timesteps`` at the end of every round."""

    def __init__(self) -> None:
        super().__init__()
        self.timesteps: list[int] = []

    def _on_rollout_end(self) -> None:
        self.timesteps.append(self.model.num_timesteps)

    def _on_step(self) -> bool:
        return True


class EpisodeRecorder(BaseCallback):
    """Records what every ``on_step`` sees."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict] = []
        self.rollout_starts = self.rollout_ends = 0

    def _on_rollout_start(self) -> None:
        self.rollout_starts += 1

    def _on_rollout_end(self) -> None:
        self.rollout_ends += 1

    def _on_step(self) -> bool:
        self.steps.append({**self.locals, "num_timesteps": self.num_timesteps})
        return True
