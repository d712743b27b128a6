"""Vectorised-environment helpers: :class:`AsyncEval` and observation-statistics merging."""

from lit_sb3.vec_env.async_eval import AsyncEval
from lit_sb3.vec_env.obs_rms import merge_obs_rms, subtract_running_mean_std

__all__ = ["AsyncEval", "merge_obs_rms", "subtract_running_mean_std"]
