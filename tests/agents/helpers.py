"""What the async-collection tests share."""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
from stable_baselines3.common.callbacks import BaseCallback

from lit_sb3.envs.multi_env import IndexableMultiEnv

#: Policy keywords for off-policy tests: 64-unit layers make a gradient step several times cheaper than the default
#: 256.
SMALL_NETWORK: dict[str, Any] = {"net_arch": [64, 64]}


def multi_env(env_id: str, n_envs: int, **kwargs: Any) -> IndexableMultiEnv:
    return IndexableMultiEnv([partial(gym.make, env_id, **kwargs) for _ in range(n_envs)])


class EpisodeRecorder(BaseCallback):
    """Keeps the final info of every episode the agent trained on (``collection`` and ``episode`` entries)."""

    def __init__(self) -> None:
        super().__init__()
        self.finals: list[dict[str, Any]] = []
        self.timesteps_at_step: list[int] = []

    def _on_step(self) -> bool:
        self.timesteps_at_step.append(self.num_timesteps)
        for info, done in zip(self.locals["infos"], self.locals["dones"], strict=True):
            if done:
                self.finals.append(info)
        return True
