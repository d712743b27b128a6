"""Asynchronous episode collection for Stable-Baselines3 gradient agents, on the worker pool."""

from lit_sb3.agents.async_agent import get_injected_agent

__all__ = ["get_injected_agent"]
