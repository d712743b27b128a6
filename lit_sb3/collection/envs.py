"""
The environments collection workers step, taken from the VecEnv an algorithm learns on (what Stable-Baselines3's
``learn`` accepts): thread workers step the very environment objects of this process, process and Ray workers
build copies (or call the factories of an ``IndexableMultiEnv`` or a ``FactoryVecEnv``).
"""

from __future__ import annotations

import functools
import itertools
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, SupportsFloat

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecEnvWrapper,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
)
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices
from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

from lit_sb3.collection.observations import select
from lit_sb3.envs.multi_env import EnvFactory, FactoryVecEnv, IndexableMultiEnv, check_same_spaces

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
                "use_mp=False (thread workers step it in this process), or a FactoryVecEnv (or IndexableMultiEnv) "
                "of picklable factories that build it in each worker"
            ) from error

    def __call__(self) -> gym.Env:
        env: gym.Env = cloudpickle.loads(self.pickled)
        return env


def collection_env_fns(env: VecEnv, *, in_process: bool) -> list[EnvFactory]:
    """
    The factory of each environment of ``env`` for the collection workers.

    :param env: The algorithm's VecEnv: a ``DummyVecEnv`` (``make_vec_env``'s output, a ``FactoryVecEnv``) or an
        ``IndexableMultiEnv`` (every environment it holds, not only the one it steps itself),
        optionally inside ``VecMonitor``, ``VecTransposeImage`` and ``VecFrameStack`` (which each worker reproduces
        around each of its environments) and, outermost, ``VecNormalize`` (whose statistics the collector keeps).
    :param in_process: Whether the workers are threads of this process (they step the environments themselves)
        or processes (they get copies; the factories of an ``IndexableMultiEnv`` or a ``FactoryVecEnv`` are called in
        each worker).
    :return: One factory per environment.
    :raises TypeError: For a VecEnv whose environments the workers cannot step, saying what to pass instead.
    """
    base, wrappers = _peeled(env.venv if isinstance(env, VecNormalize) else env)
    sub_envs, env_fns = _environments(base)
    check_same_spaces(sub_envs)
    factories: list[EnvFactory]
    if in_process:
        factories = [SharedEnv(sub_env) for sub_env in sub_envs]
    elif env_fns is not None:
        factories = env_fns
    else:
        factories = [EnvCopy(sub_env, index) for index, sub_env in enumerate(sub_envs)]
    return [WrappedEnv(factory, wrappers) for factory in factories] if wrappers else factories


def _environments(env: DummyVecEnv) -> tuple[list[gym.Env], list[EnvFactory] | None]:
    """:return: The environments the workers step (thread workers: these objects), and their factories if ``env``
    keeps them (worker processes call those instead of copying the environments)."""
    if isinstance(env, IndexableMultiEnv):
        return list(env.environments), list(env.env_fns)
    if isinstance(env, FactoryVecEnv):
        return list(env.envs), list(env.env_fns)
    return list(env.envs), None


def owns_env(factory: EnvFactory) -> bool:
    """:return: Whether the worker that built an environment with ``factory`` closes it (not the agent's own)."""
    if isinstance(factory, WrappedEnv):
        return owns_env(factory.factory)
    return not isinstance(factory, SharedEnv)


class WrappedEnv:
    """
    Builds an environment inside the per-environment equivalents of the agent's VecEnv wrappers.

    :param factory: Builds the environment.
    :param wrappers: Wrap it, innermost first.
    """

    def __init__(self, factory: EnvFactory, wrappers: list[Callable[[gym.Env], gym.Env]]) -> None:
        self.factory = factory
        self.wrappers = wrappers

    def __call__(self) -> gym.Env:
        env = self.factory()
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


class TransposedImage(gym.ObservationWrapper):
    """
    ``VecTransposeImage`` for one environment: channel-last images become channel-first.

    :param env: The environment.
    :param image_keys: Of a Dict observation space, the keys of the images (``VecTransposeImage.image_space_keys``);
        None for an image observation space.
    """

    def __init__(self, env: gym.Env, image_keys: tuple[str, ...] | None = None) -> None:
        super().__init__(env)
        self.image_keys = image_keys
        space = env.observation_space
        if image_keys is None:
            assert isinstance(space, spaces.Box)  # checked when the VecEnv was peeled
            self.observation_space = VecTransposeImage.transpose_space(space)
        else:
            assert isinstance(space, spaces.Dict)
            self.observation_space = spaces.Dict(
                {
                    key: VecTransposeImage.transpose_space(subspace, key) if key in image_keys else subspace  # type: ignore[arg-type]
                    for key, subspace in space.spaces.items()
                }
            )

    def observation(self, observation: Any) -> Any:
        if self.image_keys is None:
            return VecTransposeImage.transpose_image(observation)
        return {
            key: VecTransposeImage.transpose_image(value) if key in self.image_keys else value
            for key, value in observation.items()
        }


class StackedFrames(gym.Wrapper):
    """
    ``VecFrameStack`` for one environment (Stable-Baselines3's ``StackedObservations``; a reset starts a new stack).

    :param env: The environment.
    :param n_stack: Observations stacked.
    :param channels_order: ``"first"`` or ``"last"``: the axis they are stacked on (per key for Dict observations).
    """

    def __init__(self, env: gym.Env, n_stack: int, channels_order: str | dict[str, str]) -> None:
        super().__init__(env)
        assert isinstance(env.observation_space, spaces.Box | spaces.Dict)  # checked when the VecEnv was peeled
        self.stacked: StackedObservations[Any] = StackedObservations(1, n_stack, env.observation_space, channels_order)
        self.observation_space = self.stacked.stacked_observation_space

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(**kwargs)
        return select(self.stacked.reset(select(observation, None)), 0), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        stacked, _ = self.stacked.update(select(observation, None), np.zeros(1, dtype=bool), [{}])
        return select(stacked, 0), reward, terminated, truncated, info


def _channels_order(stacked: StackedObservations) -> str | dict[str, str]:
    """:return: The axis ``VecFrameStack``'s stacks are on, as ``StackedObservations`` takes it."""
    if hasattr(stacked, "sub_stacked_observations"):
        return {key: _channels_order(sub) for key, sub in stacked.sub_stacked_observations.items()}  # type: ignore[misc]
    return "first" if stacked.channels_first else "last"


def _peeled(env: VecEnv) -> tuple[DummyVecEnv, list[Callable[[gym.Env], gym.Env]]]:
    """
    :return: The ``DummyVecEnv`` under the wrappers, and the per-environment equivalent of each wrapper, innermost
        first (``VecMonitor`` needs none: workers report each episode in ``info["episode"]``).
    """
    wrappers: list[Callable[[gym.Env], gym.Env]] = []
    while isinstance(env, VecEnvWrapper):
        if isinstance(env, VecMonitor) and env.results_writer is not None:
            raise TypeError(
                "VecMonitor with a filename: async collection reports episodes in info['episode'] but writes no "
                "monitor file; wrap each environment in Monitor(env, filename) instead"
            )
        if isinstance(env, VecTransposeImage):
            if not env.skip:
                dict_space = isinstance(env.venv.observation_space, spaces.Dict)
                image_keys = tuple(env.image_space_keys) if dict_space else None
                wrappers.append(functools.partial(TransposedImage, image_keys=image_keys))
        elif isinstance(env, VecFrameStack):
            stacked = env.stacked_obs
            order = _channels_order(stacked)
            wrappers.append(functools.partial(StackedFrames, n_stack=stacked.n_stack, channels_order=order))
        elif isinstance(env, VecNormalize):
            raise TypeError("VecNormalize must be the outermost wrapper of an injected agent's environment")
        elif not isinstance(env, VecMonitor):
            raise TypeError(
                f"{type(env).__name__} around the environments is not supported by async collection (the workers "
                "step each environment on its own); supported: DummyVecEnv, make_vec_env's output, FactoryVecEnv, "
                "IndexableMultiEnv, "
                "inside VecMonitor, VecTransposeImage, VecFrameStack and, outermost, VecNormalize"
            )
        env = env.venv
    if isinstance(env, SubprocVecEnv):
        raise TypeError(
            "SubprocVecEnv runs its environments in its own processes, out of reach of the collection workers: pass "
            "make_vec_env(env_id, n_envs) (a DummyVecEnv) or FactoryVecEnv(env_fns) (the same environment count), "
            "with use_mp=True to step them in worker processes"
        )
    if not isinstance(env, DummyVecEnv):
        raise TypeError(
            f"async collection needs the environments of a DummyVecEnv (or a FactoryVecEnv, an IndexableMultiEnv), got "
            f"{type(env).__name__}"
        )
    wrappers.reverse()
    return env, wrappers


@dataclass(frozen=True)
class EnvCall:
    """
    A VecEnv's ``get_attr``, ``set_attr`` or ``env_method``, made on an environment as ``DummyVecEnv`` makes it.

    :param kind: Which of the three.
    :param name: The attribute or method.
    :param args: ``set_attr``: the value; ``env_method``: the positional arguments.
    :param kwargs: ``env_method``: the keyword arguments.
    """

    kind: Literal["get_attr", "set_attr", "env_method"]
    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def apply(self, env: gym.Env) -> Any:
        """:return: What the call returns on ``env`` (None for ``set_attr``)."""
        while isinstance(env, TransposedImage | StackedFrames):  # the agent's env is under the workers' wrappers
            env = env.env
        if self.kind == "set_attr":
            setattr(env, self.name, self.args[0])
            return None
        attribute = env.get_wrapper_attr(self.name)
        return attribute if self.kind == "get_attr" else attribute(*self.args, **self.kwargs)


#: Methods Stable-Baselines3 itself calls on the training env that stay in this process: HER's reward, a pure
#: function of its arguments, computed for every sampled batch.
LOCAL_METHODS = frozenset({"compute_reward"})


class WorkerEnvRouting:
    """
    Routes ``get_attr``, ``set_attr`` and ``env_method`` of an agent's VecEnv to the environments worker processes
    step (copies of its own): installed on the ``DummyVecEnv`` under its wrappers (which pass these calls down),
    removed when the collection stops. ``set_attr`` also sets the attribute on the copies of this process.

    :param env: The agent's VecEnv.
    :param call: Makes a call on the workers' environments of the given indices and returns their results in order.
    """

    def __init__(self, env: VecEnv, call: Callable[[EnvCall, list[int]], list[Any]]) -> None:
        self.base, _ = _peeled(env.venv if isinstance(env, VecNormalize) else env)
        self.call = call
        base = self.base
        self._local_set_attr = functools.partial(type(base).set_attr, base)
        self._local_env_method = functools.partial(type(base).env_method, base)
        base.get_attr = self.get_attr  # type: ignore[method-assign]
        base.set_attr = self.set_attr  # type: ignore[method-assign]
        base.env_method = self.env_method  # type: ignore[method-assign]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self.call(EnvCall("get_attr", attr_name), self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._local_set_attr(attr_name, value, indices)
        self.call(EnvCall("set_attr", attr_name, (value,)), self._indices(indices))

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        if method_name in LOCAL_METHODS:
            return self._local_env_method(method_name, *method_args, indices=indices, **method_kwargs)
        return self.call(EnvCall("env_method", method_name, method_args, method_kwargs), self._indices(indices))

    def remove(self) -> None:
        """Give the VecEnv its own methods back."""
        for name in ("get_attr", "set_attr", "env_method"):
            vars(self.base).pop(name, None)

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        if isinstance(self.base, IndexableMultiEnv):  # it addresses every environment it holds
            count = len(self.base)
            return list(range(count)) if indices is None else [indices] if isinstance(indices, int) else list(indices)
        return list(self.base._get_indices(indices))
