"""Where a pool's workers run, however a user spells it: checked once, then built into the pool's backend."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from lit_sb3.checks import check_positive_int
from lit_sb3.workers.backend import Backend
from lit_sb3.workers.local import LocalBackend, default_start_method, start_fork_server
from lit_sb3.workers.ray_options import actor_options
from lit_sb3.workers.threads import ThreadBackend

#: Where workers run, by the name their backend reports (:attr:`Backend.name <lit_sb3.workers.backend.Backend.name>`).
BackendName = Literal["processes", "threads", "ray"]
BACKEND_NAMES: tuple[BackendName, ...] = ("processes", "threads", "ray")
#: Other names users pass: ``"local"`` is AsyncEval's (and sb3-contrib's) name of local processes.
BACKEND_ALIASES: Mapping[str, BackendName] = {"local": "processes"}
#: What users may pass as ``backend``: a name, an alias, a backend object, or None for local processes.
BackendSpelling = BackendName | Literal["local"] | Backend | None

_DESCRIPTIONS: Mapping[str, str] = {
    "processes": "local processes",
    "threads": "threads of this process",
    "ray": "Ray actors",
}


@dataclass(frozen=True)
class BackendChoice:
    """
    Where a pool's workers run, checked at construction: :meth:`build` turns it into the pool's backend. Make one
    from the keywords of AsyncEval and the engines with :meth:`parse`, or from async-gym-agents' ``use_mp`` with
    :meth:`from_use_mp`.

    :param backend: ``"processes"`` (worker processes on this machine), ``"threads"`` (worker threads of this
        process), ``"ray"`` (one Ray actor per worker; ``pip install lit_sb3[ray]``) or a backend object, used as
        it is (by one pool).
    :param start_method: With local processes: the ``multiprocessing`` start method; ``"forkserver"`` where
        available by default, else ``"spawn"``.
    :param ray_address: With Ray: the cluster to connect to (``ray.init(address=...)``); by default the connection
        this process has, else a new local Ray instance.
    :param worker_resources: With Ray: the resources of each worker's actor: ``num_cpus`` (1 by default),
        ``num_gpus``, ``memory`` and custom resources by name.
    """

    backend: BackendName | Backend = "processes"
    start_method: str | None = None
    ray_address: str | None = None
    worker_resources: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.backend, Backend) and self.backend not in BACKEND_NAMES:
            names = (*BACKEND_NAMES, *BACKEND_ALIASES)
            raise ValueError(f"backend must be one of {names} or a Backend object, got {self.backend!r}")
        if self.backend != "ray" and (self.ray_address is not None or self.worker_resources is not None):
            raise ValueError(f"ray_address and worker_resources need backend='ray', but the workers are {self._what}")
        if self.backend != "processes" and self.start_method is not None:
            raise ValueError(f"start_method is for backend='local' only, but the workers are {self._what}")
        if self.ray_address is not None and not isinstance(self.ray_address, str):
            raise TypeError(f"ray_address must be a str (e.g. 'auto' or 'ray://head:10001'), got {self.ray_address!r}")
        actor_options(self.worker_resources)  # checks the amounts before anything starts

    @classmethod
    def parse(
        cls,
        backend: str | Backend | None = None,
        *,
        start_method: str | None = None,
        ray_address: str | None = None,
        worker_resources: Mapping[str, float] | None = None,
    ) -> BackendChoice:
        """
        :param backend: ``"processes"`` (also spelled ``"local"``, and the default for None), ``"threads"``,
            ``"ray"`` or a backend object.
        :param start_method: See :class:`BackendChoice`.
        :param ray_address: See :class:`BackendChoice`.
        :param worker_resources: See :class:`BackendChoice`.
        :return: The checked choice.
        :raises ValueError: if the keywords do not hold together (Ray's keywords without Ray...).
        """
        chosen: BackendName | Backend = "processes"
        if isinstance(backend, str):
            chosen = BACKEND_ALIASES.get(backend, cast(BackendName, backend))  # checked by the constructor
        elif backend is not None:
            chosen = backend
        return cls(chosen, start_method=start_method, ray_address=ray_address, worker_resources=worker_resources)

    @classmethod
    def from_use_mp(
        cls,
        use_mp: bool,
        backend: str | None = None,
        *,
        ray_address: str | None = None,
        worker_resources: Mapping[str, float] | None = None,
    ) -> BackendChoice:
        """
        async-gym-agents' spelling (``get_injected_agent``): worker threads, or with ``use_mp=True`` local processes, or
        Ray actors with ``backend="ray"`` too.

        :param use_mp: Whether workers are processes.
        :param backend: None, or ``"ray"`` with ``use_mp=True``.
        :param ray_address: See :class:`BackendChoice`.
        :param worker_resources: See :class:`BackendChoice`.
        :return: The checked choice.
        """
        if not isinstance(use_mp, bool):
            raise TypeError(f"use_mp must be a bool, got {type(use_mp)!r}")
        if backend not in (None, "ray"):
            raise ValueError(
                f"backend must be None (threads, or local processes with use_mp=True) or 'ray', got {backend!r}"
            )
        if backend == "ray" and not use_mp:
            raise ValueError("backend='ray' runs workers as Ray actors, which are processes: pass use_mp=True with it")
        name: BackendName = "ray" if backend == "ray" else "processes" if use_mp else "threads"
        return cls(name, ray_address=ray_address, worker_resources=worker_resources)

    @property
    def name(self) -> str:
        """What reports call the backend (``"processes"``, ``"threads"``, ``"ray"``, or a backend object's name)."""
        return self.backend.name if isinstance(self.backend, Backend) else self.backend

    @property
    def _what(self) -> str:
        return _DESCRIPTIONS.get(self.name, f"a {type(self.backend).__name__}")

    def default_workers(self, n_envs: int) -> int:
        """
        :param n_envs: Number of environments the workers share out.
        :return: One thread (threads share the interpreter lock); else one worker per core but one, which the
            trainer keeps, at most one per environment and at least one.
        """
        check_positive_int("n_envs", n_envs)
        if self.name == "threads":
            return 1
        return max(1, min(n_envs, (os.cpu_count() or 1) - 1))

    def prepare(self, preload: Sequence[str] = ()) -> None:
        """
        Start the fork server local worker processes will come from now, so that its imports run while the caller
        builds the rest (nothing to do for other backends and start methods).

        :param preload: Modules the fork server imports once (the heavy modules of the apps); only the first start
            of a process's fork server sets them, so pass the same to :meth:`build`.
        """
        if self.backend == "processes" and (self.start_method or default_start_method()) == "forkserver":
            start_fork_server(preload)

    def build(self, preload: Sequence[str] = ()) -> Backend:
        """
        :param preload: With local processes: modules the fork server imports once (see :meth:`prepare`).
        :return: A new backend for one pool (the backend object itself, if one was given).
        """
        if isinstance(self.backend, Backend):
            return self.backend
        if self.backend == "processes":
            return LocalBackend(self.start_method, preload=preload)
        if self.backend == "threads":
            return ThreadBackend()
        from lit_sb3.workers.ray_backend import RayBackend  # imports Ray, which only this backend needs

        return RayBackend(self.ray_address, worker_resources=self.worker_resources)
