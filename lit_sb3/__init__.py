"""lit_sb3: population-based and asynchronous reinforcement learning on Stable-Baselines3."""

from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.envs.multi_env import FactoryVecEnv, IndexableMultiEnv
from lit_sb3.evaluation.obs_rms import merge_obs_rms
from lit_sb3.policies import LinearPolicy, MlpPolicy
from lit_sb3.population import ARS, CEM, CMAES, ES, PGPE, SNES, XNES, ClipUp
from lit_sb3.vec_env.async_eval import AsyncEval
from lit_sb3.workers.errors import PoolClosedError, WorkerDiedError, WorkerError, WorkerTimeoutError

__version__ = "0.1.0"

__all__ = [
    "ARS",
    "CEM",
    "CMAES",
    "ES",
    "PGPE",
    "SNES",
    "XNES",
    "AsyncEval",
    "ClipUp",
    "FactoryVecEnv",
    "IndexableMultiEnv",
    "LinearPolicy",
    "MlpPolicy",
    "PoolClosedError",
    "WorkerDiedError",
    "WorkerError",
    "WorkerTimeoutError",
    "get_injected_agent",
    "merge_obs_rms",
]
