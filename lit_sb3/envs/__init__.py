"""Environments for the async episode collection of gradient agents."""

from lit_sb3.envs.multi_env import FactoryVecEnv, IndexableMultiEnv

__all__ = ["FactoryVecEnv", "IndexableMultiEnv"]
