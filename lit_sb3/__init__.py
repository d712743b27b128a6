"""
lit_sb3: population-based and asynchronous reinforcement learning on Stable-Baselines3.

The names below, and the subpackages, are imported on first use (PEP 562), so that importing one part (a worker
process imports ``lit_sb3.workers`` and ``lit_sb3.evaluation``) does not import the others: the optimisers import
cma, which imports matplotlib where it is installed (about 0.4 s, paid by every fork server before its first worker).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lit_sb3.agents.async_agent import get_injected_agent
    from lit_sb3.envs.multi_env import FactoryVecEnv, IndexableMultiEnv
    from lit_sb3.evaluation.obs_rms import merge_obs_rms
    from lit_sb3.policies import LinearPolicy, MlpPolicy
    from lit_sb3.population import ARS, CEM, CMAES, ES, PGPE, SNES, XNES, ClipUp
    from lit_sb3.vec_env.async_eval import AsyncEval
    from lit_sb3.workers.errors import PoolClosedError, WorkerDiedError, WorkerError, WorkerTimeoutError

__version__ = "0.1.0"

#: The module each public name comes from.
_SOURCES = {
    "ARS": "lit_sb3.population",
    "CEM": "lit_sb3.population",
    "CMAES": "lit_sb3.population",
    "ES": "lit_sb3.population",
    "PGPE": "lit_sb3.population",
    "SNES": "lit_sb3.population",
    "XNES": "lit_sb3.population",
    "ClipUp": "lit_sb3.population",
    "AsyncEval": "lit_sb3.vec_env.async_eval",
    "FactoryVecEnv": "lit_sb3.envs.multi_env",
    "IndexableMultiEnv": "lit_sb3.envs.multi_env",
    "LinearPolicy": "lit_sb3.policies",
    "MlpPolicy": "lit_sb3.policies",
    "PoolClosedError": "lit_sb3.workers.errors",
    "WorkerDiedError": "lit_sb3.workers.errors",
    "WorkerError": "lit_sb3.workers.errors",
    "WorkerTimeoutError": "lit_sb3.workers.errors",
    "get_injected_agent": "lit_sb3.agents.async_agent",
    "merge_obs_rms": "lit_sb3.evaluation.obs_rms",
}

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


#: The package's modules and subpackages (``agents``, ``population``, ...), attributes of the package once imported.
_PARTS = frozenset(module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith("_"))

if not TYPE_CHECKING:  # type checkers see the imports above, and report names that are not there

    def __getattr__(name: str) -> Any:
        if name in _SOURCES:
            value = getattr(importlib.import_module(_SOURCES[name]), name)
            globals()[name] = value  # later lookups skip this function
            return value
        if name in _PARTS:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'lit_sb3' has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *_SOURCES, *_PARTS})
