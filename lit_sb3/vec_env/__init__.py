"""Evaluating populations from the main process: :class:`AsyncEval`, :class:`InProcessEval`, statistics merging."""

from lit_sb3.evaluation.obs_rms import merge_obs_rms, subtract_running_mean_std
from lit_sb3.vec_env.async_eval import AsyncEval
from lit_sb3.vec_env.candidate_eval import CandidateEval, InProcessEval

__all__ = ["AsyncEval", "CandidateEval", "InProcessEval", "merge_obs_rms", "subtract_running_mean_std"]
