"""
The environments collection workers step, taken from the VecEnv an algorithm learns on (what Stable-Baselines3's
``learn`` accepts): thread workers step the very environment objects of this process, process and Ray workers
build copies (or call the factories of an ``IndexableMultiEnv``).
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Callable
from typing import Any

import cloudpickle
import gymnasium as gym
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecEnvWrapper, VecMonitor, VecNormalize

from lit_sb3.envs.multi_env import IndexableMultiEnv

EnvFactory = Callable[[], gym.Env]

_shared: weakref.WeakValueDictionary[int, gym.Env] = weakref.WeakValueDictionary()
_shared_keys = itertools.count()


class SharedEnv:
    """
    Hands a thread worker an environment of this process itself: it pickles (through the pool) as a key, so the
    environment is never copied, and the worker does not close it (it belongs to the agent's VecEnv).

    :param env: The environment.
    """

    def __init__(self, env: gym.Env, key: int | None = None) -> None:
        self.env = env
        self.key = next(_shared_keys) if key is None else key
        self.process = os.getpid()
        _shared[self.key] = env

    def __call__(self) -> gym.Env:
        return self.env

    def __reduce__(self) -> tuple[Any, ...]:
        return _shared_env, (self.key, self.process)


def _shared_env(key: int, process: int) -> SharedEnv:
    if process != os.getpid():
        raise RuntimeError(
            "an environment shared with thread workers reached another process: it can only be stepped in the process "
            "that holds it (use_mp=True copies the environments instead)"
        )
    env = _shared.get(key)
    if env is None:
        raise RuntimeError("the environment shared with the thread workers is gone (its VecEnv was garbage collected)")
    return SharedEnv(env, key)


class EnvCopy:
    """
    Builds a copy of an environment in a worker process (from its cloudpickled bytes, unpickled only by the worker
    that steps it).

    :param env: The environment.
    :param index: Its index in the VecEnv (for the error when it cannot be pickled).
    """

    def __init__(self, env: gym.Env, index: int) -> None:
        try:
            self.pickled = cloudpickle.dumps(env)
        except Exception as error:
            raise TypeError(
                f"environment {index} ({type(env).__name__}) cannot be copied to worker processes: {error}. Pass "
                "use_mp=False (thread workers step it in this process), or an IndexableMultiEnv of picklable "
                "factories that build it in each worker"
            ) from error

    def __call__(self) -> gym.Env:
        env: gym.Env = cloudpickle.loads(self.pickled)
        return env


def collection_env_fns(env: VecEnv, *, in_process: bool) -> list[EnvFactory]:
    """
    The factory of each environment of ``env`` for the collection workers.

    :param env: The algorithm's VecEnv: a ``DummyVecEnv`` (``make_vec_env``'s output, an ``IndexableMultiEnv``),
        optionally inside ``VecMonitor`` and, outermost, ``VecNormalize`` (whose statistics the collector keeps).
    :param in_process: Whether the workers are threads of this process (they step the environments themselves)
        or processes (they get copies; an ``IndexableMultiEnv``'s factories are called in each worker).
    :return: One factory per environment.
    :raises TypeError: For a VecEnv whose environments the workers cannot step, saying what to pass instead.
    """
    base = _unwrapped(env.venv if isinstance(env, VecNormalize) else env)
    if in_process:
        return [SharedEnv(sub_env) for sub_env in base.envs]
    if isinstance(base, IndexableMultiEnv):
        return list(base.env_fns)
    return [EnvCopy(sub_env, index) for index, sub_env in enumerate(base.envs)]


def _unwrapped(env: VecEnv) -> DummyVecEnv:
    """:return: The ``DummyVecEnv`` under the wrappers the workers reproduce (``VecMonitor``: episode statistics)."""
    while isinstance(env, VecMonitor):
        if env.results_writer is not None:
            raise TypeError(
                "VecMonitor with a filename: async collection reports episodes in info['episode'] but writes no "
                "monitor file; wrap each environment in Monitor(env, filename) instead"
            )
        env = env.venv
    if isinstance(env, SubprocVecEnv):
        raise TypeError(
            "SubprocVecEnv runs its environments in its own processes, out of reach of the collection workers: pass "
            "make_vec_env(env_id, n_envs) (a DummyVecEnv) or an IndexableMultiEnv, with use_mp=True to step them in "
            "worker processes"
        )
    if isinstance(env, VecEnvWrapper):
        raise TypeError(
            f"{type(env).__name__} around the environments is not supported by async collection yet (the workers "
            "step each environment on its own); supported: DummyVecEnv, make_vec_env's output, IndexableMultiEnv, "
            "VecMonitor and, outermost, VecNormalize"
        )
    if not isinstance(env, DummyVecEnv):
        raise TypeError(
            f"async collection needs the environments of a DummyVecEnv (or an IndexableMultiEnv), got "
            f"{type(env).__name__}"
        )
    return env
