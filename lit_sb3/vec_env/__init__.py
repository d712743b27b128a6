"""Evaluating populations from the main process: :class:`AsyncEval`, :class:`InProcessEval`, statistics merging."""

from lit_sb3.vec_env.async_eval import AsyncEval
from lit_sb3.vec_env.candidate_eval import CandidateEval, InProcessEval
from lit_sb3.vec_env.obs_rms import merge_obs_rms, subtract_running_mean_std

__all__ = ["AsyncEval", "CandidateEval", "InProcessEval", "merge_obs_rms", "subtract_running_mean_std"]
