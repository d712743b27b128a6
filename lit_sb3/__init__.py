"""lit_sb3: population-based and asynchronous reinforcement learning on Stable-Baselines3."""

from lit_sb3.vec_env.async_eval import AsyncEval
from lit_sb3.vec_env.obs_rms import merge_obs_rms
from lit_sb3.workers.errors import PoolClosedError, WorkerDiedError, WorkerError, WorkerTimeoutError

__version__ = "0.1.0"

__all__ = ["AsyncEval", "PoolClosedError", "WorkerDiedError", "WorkerError", "WorkerTimeoutError", "merge_obs_rms"]
