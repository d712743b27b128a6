"""Engines that train a Stable-Baselines3 algorithm on a worker pool: asynchronous threads or one loop, with
RLightning's API."""

from lit_sb3.engine.async_rl_engine import AsyncCoordinator, AsyncRLEngine
from lit_sb3.engine.base import BaseEngine
from lit_sb3.engine.buffer import DataBuffer, ReplayData, RolloutQueue
from lit_sb3.engine.config import EngineConfig
from lit_sb3.engine.env_group import EnvGroup
from lit_sb3.engine.policy_group import PolicyGroup
from lit_sb3.engine.sync_engine import SyncRLEngine

__all__ = [
    "AsyncCoordinator",
    "AsyncRLEngine",
    "BaseEngine",
    "DataBuffer",
    "EngineConfig",
    "EnvGroup",
    "PolicyGroup",
    "ReplayData",
    "RolloutQueue",
    "SyncRLEngine",
]
