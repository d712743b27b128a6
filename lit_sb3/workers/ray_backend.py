"""Backend running each worker as a Ray actor, on this machine or on a Ray cluster (``pip install lit_sb3[ray]``).

An actor runs the same worker loop as a local process, in a thread of its own; the pool's messages reach it through
actor calls (numbered, so they are served in order) and its replies come back through a long-polling ``collect``
call, which also carries the app's progress board as a heartbeat. Published arrays go once into Ray's object store;
their references travel with the next message to each actor, which reads them zero-copy.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import re
import threading
import time
import traceback
import weakref
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

try:
    import ray
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("backend='ray' needs Ray: pip install 'lit_sb3[ray]'") from exc

from lit_sb3.workers.arrays import ArrayPublisher, SupportsClose
from lit_sb3.workers.ray_options import actor_options
from lit_sb3.workers.threads import MessagePipe, NotifiedBackend, NotifyingHandle, PipeChannel
from lit_sb3.workers.worker import run_worker

#: Longest an actor holds a ``collect`` call open without replies: how often it reports its progress (seconds).
HEARTBEAT_INTERVAL = 0.5
#: Longest the reply collector waits on the actors it knows before it looks for newly started ones (seconds).
COLLECT_INTERVAL = 0.05


@dataclass
class _Closer:
    close: Callable[[], None]


class _InActor:
    """What the app of this actor process reaches through handles: published arrays and its progress board."""

    published: dict[str, ray.ObjectRef] = {}  # noqa: RUF012 - one actor per process: state of the process
    board: np.ndarray | None = None


@dataclass(frozen=True)
class ObjectStoreHandle:
    """
    A published array in Ray's object store, opened by its key in an actor.

    :param key: Key of the array among what the actor was told about.
    """

    key: str

    def open(self) -> tuple[SupportsClose, np.ndarray]:
        # Read-only and zero-copy; the store frees the array once nobody holds a reference.
        return _Closer(lambda: None), ray.get(_InActor.published[self.key])


@dataclass(frozen=True)
class ActorBoardHandle:
    """
    The progress board of an actor's app: a plain array in the actor process, reported by its heartbeats.

    :param shape: Shape of the board.
    """

    shape: tuple[int, ...]

    def open(self) -> tuple[SupportsClose, np.ndarray]:
        board = _InActor.board = np.zeros(self.shape, np.float64)

        def detach() -> None:
            _InActor.board = None

        return _Closer(detach), board


class HeartbeatBoard:
    """
    The pool's view of an actor's progress board, as its last heartbeat reported it. Start times travel as ages:
    the clocks of two nodes cannot be compared.

    :param shape: Shape of the board.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.array = np.zeros(shape, np.float64)
        self.handle = ActorBoardHandle(shape)

    def update(self, ages: np.ndarray) -> None:
        """
        :param ages: The actor's board, with the seconds each unit has run in place of its start time.
        """
        self.array[:, 2] = ages[:, 2]
        self.array[:, 1] = time.monotonic() - ages[:, 1]
        self.array[:, 0] = ages[:, 0]  # written last: the reader trusts the start time of a unit it sees

    def close(self) -> None:
        """Nothing to release: the board lives in the actor."""


class PicklingChannel(PipeChannel):
    """
    The channel of an actor's worker loop: replies leave it pickled, as they leave a local worker process, so that
    one that cannot be pickled fails its request in the loop (the pool gets the error, the worker goes on) instead
    of the actor's ``collect`` call.
    """

    def send(self, message: Any) -> None:
        super().send(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


class RayWorkerActor:
    """
    The actor of one worker: serves the pool through the worker loop, run in a thread.

    :param app_factory: Cloudpickled callable building the app.
    """

    def __init__(self, app_factory: bytes) -> None:
        # Thread limits need nothing here: Ray sets OMP_NUM_THREADS to the actor's num_cpus (1 by default).
        self._inbox = MessagePipe(threading.Condition())
        self._outbox = MessagePipe(threading.Condition())
        self._next_message = 0
        self._held: dict[int, Any] = {}
        self._ending = "ended"
        threading.Thread(target=self._serve, args=(app_factory,), name="lit-sb3-worker", daemon=True).start()

    def _serve(self, app_factory: bytes) -> None:
        try:
            run_worker(PicklingChannel(self._inbox, self._outbox), app_factory)
        except BaseException:  # a failure of the loop itself: the pool sees a dead worker and this traceback
            self._ending = f"failed:\n{traceback.format_exc()}"
        finally:
            self._outbox.close()

    @ray.method(concurrency_group="inbox")
    def deliver(self, number: int, message: Any, published: dict[str, ray.ObjectRef], forgotten: list[str]) -> None:
        """
        :param number: Position of the message in what the pool sent this actor.
        :param message: A message for the worker loop.
        :param published: Arrays published since the last message (their references, unresolved).
        :param forgotten: Keys of arrays that are no longer published.
        """
        _InActor.published.update(published)
        for key in forgotten:
            _InActor.published.pop(key, None)
        self._held[number] = message
        while self._next_message in self._held:
            self._inbox.put(self._held.pop(self._next_message))
            self._next_message += 1

    @ray.method(concurrency_group="outbox")
    def collect(self) -> tuple[list[bytes], np.ndarray | None, str | None]:
        """
        :return: The replies sent since the last call, pickled (waiting for some up to a heartbeat interval), the
            progress board with ages in place of start times, and how the worker loop ended (None while it runs).
        """
        outbox = self._outbox
        with outbox.condition:
            outbox.condition.wait_for(lambda: bool(outbox.items) or outbox.closed, HEARTBEAT_INTERVAL)
            replies = list(outbox.items)
            outbox.items.clear()
            ending = self._ending if outbox.closed else None
        board = _InActor.board
        ages = None
        if board is not None:
            ages = board.copy()
            ages[:, 1] = time.monotonic() - ages[:, 1]
        return replies, ages, ending


_RemoteWorkerActor = ray.remote(concurrency_groups={"inbox": 1, "outbox": 1})(  # type: ignore[call-overload]
    RayWorkerActor
)


class _PublishedArrays:
    """The arrays published through a backend, by key: every message to an actor brings it up to date."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refs: dict[str, ray.ObjectRef] = {}

    def replace(self, old_key: str | None, new: tuple[str, ray.ObjectRef] | None) -> None:
        with self._lock:
            if old_key is not None:
                del self._refs[old_key]
            if new is not None:
                self._refs[new[0]] = new[1]

    def snapshot(self) -> dict[str, ray.ObjectRef]:
        with self._lock:
            return dict(self._refs)


class ObjectStorePublisher(ArrayPublisher):
    """
    Publishes an array by putting it once into Ray's object store.

    :param published: Where the backend keeps what is published.
    """

    def __init__(self, published: _PublishedArrays) -> None:
        self._published = published
        self._key: str | None = None

    def publish(self, array: np.ndarray) -> ObjectStoreHandle:
        ref = ray.put(array)
        key = ref.hex()
        self._published.replace(self._key, (key, ref))
        self._key = key
        return ObjectStoreHandle(key)

    def close(self) -> None:
        self._published.replace(self._key, None)
        self._key = None


class RayWorker(NotifyingHandle):
    """
    The pool's side of a worker actor. Replies are gathered by the backend's collector thread.

    :param worker_index: Index of the worker in the pool.
    :param actor: The actor.
    :param published: What is published through the backend.
    """

    def __init__(self, worker_index: int, actor: Any, published: _PublishedArrays) -> None:
        self.worker_index = worker_index
        self.actor = actor
        self.replies: deque[Any] = deque()
        # The actor's collect call in progress; None once the actor is gone or done.
        self.pending: ray.ObjectRef | None = actor.collect.remote()
        self.ending: str | None = None  # how the worker ended, once it has
        self._published = published
        self._told: set[str] = set()
        self._numbers = itertools.count()

    def send(self, message: Any) -> None:
        published = self._published.snapshot()
        new = {key: ref for key, ref in published.items() if key not in self._told}
        forgotten = [key for key in self._told if key not in published]
        self._told = set(published)
        self.actor.deliver.remote(next(self._numbers), message, new, forgotten)

    def recv(self) -> Any:
        if not self.replies:
            raise EOFError(f"worker {self.worker_index} has no reply")
        return self.replies.popleft()

    def poll(self) -> bool:
        return bool(self.replies)

    @property
    def ended(self) -> bool:
        return self.ending is not None

    def describe_exit(self) -> str:
        return f"Ray actor, {self.ending or 'running'}"

    def kill(self) -> None:
        if self.ending is None:
            self.ending = "killed"
        self.release()

    def join(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.pending is not None and time.monotonic() < deadline:
            time.sleep(COLLECT_INTERVAL)
        return self.pending is None

    def release(self) -> None:
        if ray.is_initialized():  # else Ray would start a new instance to kill an actor that is gone
            with contextlib.suppress(Exception):  # already gone
                ray.kill(self.actor, no_restart=True)


class OwnRay:
    """
    The Ray instance the backends of this process started: the backends that find it connected share it, and the
    last of them to close shuts it down (never a Ray the user connected to).
    """

    _lock = threading.Lock()
    _users = 0

    @classmethod
    def connect(cls, address: str | None) -> bool:
        """
        :param address: The cluster a backend was asked to connect to, if any.
        :return: Whether the backend shares the Ray instance lit_sb3 started (started now or by another backend).
        :raises ValueError: if ``address`` is given while this process is already connected to Ray.
        """
        with cls._lock:
            if ray.is_initialized():
                if address is not None:
                    raise ValueError(
                        f"ray_address={address!r} was given, but this process is already connected to Ray: leave "
                        "ray_address out to use that connection, or call ray.shutdown() first"
                    )
                if cls._users == 0:
                    return False  # the user's connection
                cls._users += 1
                return True
            cls._users = 0  # a Ray instance lit_sb3 started was shut down by someone else
            try:
                if address is None:
                    ray.init(address="local", include_dashboard=False)
                else:
                    ray.init(address=address)
            except BaseException:  # a Ctrl-C while it starts: what started goes down
                ray.shutdown()
                raise
            cls._users = 1
            return True

    @classmethod
    def disconnect(cls) -> None:
        """A backend that shared the Ray instance lit_sb3 started is done with it: the last one shuts it down."""
        with cls._lock:
            cls._users = max(cls._users - 1, 0)
            if cls._users == 0:
                ray.shutdown()


class RayBackend(NotifiedBackend):
    """
    Workers as Ray actors, one per worker, placed by Ray on the nodes that have the resources they ask for.

    A worker whose actor dies (its process killed, its node gone) is replaced by the pool like a local process, and
    its unfinished tasks handed to others: Ray's own actor restarts stay off, since a restarted actor would have
    lost its tasks without the pool knowing.

    :param address: Ray cluster to connect to (``ray.init(address=...)``); by default the connection this process
        already has, else a new local Ray instance (never a cluster a previous ``ray start`` left running), shared
        with the other backends of this process that find it connected and shut down by the last one to close.
    :param worker_resources: Resources of each actor: ``num_cpus`` (1 by default), ``num_gpus``, ``memory`` and
        custom resources by name.
    """

    name = "ray"
    #: The open backends of this process (what their actors hold counts against the cluster's room).
    _open: ClassVar[weakref.WeakSet[RayBackend]] = weakref.WeakSet()

    def __init__(self, address: str | None = None, *, worker_resources: Mapping[str, float] | None = None) -> None:
        self._actor_options = actor_options(worker_resources)
        self.uses_own_ray = OwnRay.connect(address)
        try:
            check_placeable(self._actor_options)
        except ValueError:
            self.close_ray()
            raise
        super().__init__()
        self._published = _PublishedArrays()
        self._workers: list[RayWorker] = []
        self._boards: dict[int, HeartbeatBoard] = {}
        self._current: dict[int, RayWorker] = {}
        self._closing = False
        RayBackend._open.add(self)
        self._collector = threading.Thread(target=self._collect, name="lit-sb3-ray-collector", daemon=True)
        self._collector.start()

    def resources_in_use(self) -> dict[str, float]:
        """:return: What the actors of this backend ask of the cluster, by Ray's resource names."""
        return {name: amount * len(self._current) for name, amount in _resources(self._actor_options).items()}

    def start_worker(self, worker_index: int, app_factory: bytes) -> RayWorker:
        if worker_index not in self._current:  # not a replacement: one more actor at once
            others = sum(
                (Counter(backend.resources_in_use()) for backend in list(RayBackend._open) if backend is not self),
                Counter[str](),
            )
            check_room(self._actor_options, len(self._current) + 1, others)
        options = {"max_restarts": 0, "max_task_retries": 0, **self._actor_options}
        actor = _RemoteWorkerActor.options(**options).remote(app_factory)
        worker = RayWorker(worker_index, actor, self._published)
        with self._activity:
            self._workers.append(worker)
            self._current[worker_index] = worker
        return worker

    def array_publisher(self) -> ObjectStorePublisher:
        return ObjectStorePublisher(self._published)

    def progress_board(self, worker_index: int, shape: tuple[int, ...]) -> HeartbeatBoard:
        board = self._boards[worker_index] = HeartbeatBoard(shape)
        return board

    def close(self) -> None:
        with self._activity:
            self._closing = True
            workers, self._workers = self._workers, []
        self._collector.join()
        RayBackend._open.discard(self)
        for worker in workers:
            worker.release()
        self.close_ray()

    def close_ray(self) -> None:
        """Give up this backend's share of the Ray instance lit_sb3 started, if it has one."""
        if self.uses_own_ray:
            self.uses_own_ray = False
            OwnRay.disconnect()

    def _collect(self) -> None:
        """Gather the replies, heartbeats and ends of every actor (the collector thread); a failure here ends every
        worker with its reason, for the pool to raise."""
        try:
            self._collect_replies()
        except Exception:
            self._end_workers(f"the pool's Ray reply collector failed:\n{traceback.format_exc()}")

    def _collect_replies(self) -> None:
        while True:
            with self._activity:
                if self._closing:
                    return
                self._workers = [worker for worker in self._workers if worker.pending is not None]
                by_call = {worker.pending: worker for worker in self._workers}
            if not by_call:
                time.sleep(COLLECT_INTERVAL)
                continue
            if not ray.is_initialized():  # any Ray call now would start a new Ray instance
                self._end_workers("Ray was shut down while the pool was open")
                return
            calls = list(by_call)
            ready, _ = ray.wait(calls, num_returns=1, timeout=COLLECT_INTERVAL)
            if ready:
                ready, _ = ray.wait(calls, num_returns=len(calls), timeout=0)
            for call in ready:
                self._take(by_call[call], call)

    def _end_workers(self, reason: str) -> None:
        """:param reason: Why every worker of the backend is gone."""
        with self._activity:
            for worker in self._workers:
                worker.pending = None
                if worker.ending is None:
                    worker.ending = reason
            self._activity.notify_all()

    def _take(self, worker: RayWorker, call: ray.ObjectRef) -> None:
        ages: np.ndarray | None = None
        try:
            pickled, ages, ending = ray.get(call)
            replies = [pickle.loads(reply) for reply in pickled]
        except ray.exceptions.RayActorError as error:  # killed, its process or node gone
            replies, ending = [], f"died: {death_reason(error)}"
        except Exception as error:  # its replies cannot be read here
            replies, ending = [], f"unreadable: {error!r}"
        with self._activity:
            worker.replies.extend(replies)
            if ages is not None and self._current.get(worker.worker_index) is worker:
                self._boards[worker.worker_index].update(ages)
            if ending is None:
                worker.pending = worker.actor.collect.remote()
            else:
                worker.pending = None
                if worker.ending is None:
                    worker.ending = ending
            if replies or ending is not None:
                self._activity.notify_all()


def death_reason(error: ray.exceptions.RayActorError) -> str:
    """
    :param error: What Ray raised for a call to a dead actor.
    :return: Why it died and where, in one line (Ray's message spans many).
    """
    text = str(error)
    reason = re.search(r"The actor (?:is dead|died) because ([^.]*)", text)
    where = dict(re.findall(r"^\s*(actor_id|pid|ip): (\S+)\s*$", text, re.MULTILINE))
    details = ", ".join(f"{name} {value}" for name, value in where.items())
    return (reason.group(1) if reason else text.splitlines()[0]) + (f" ({details})" if details else "")


def check_placeable(options: Mapping[str, Any]) -> None:
    """
    :param options: Options of a worker's actor.
    :raises ValueError: if no node of the cluster has the resources of one actor (Ray would wait for one forever).
    """
    wanted = _resources(options)
    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    if not any(all(node.get(name, 0) >= amount for name, amount in wanted.items()) for node in nodes):
        raise ValueError(
            f"worker_resources: no node of the Ray cluster has what one worker asks for ({wanted}); the nodes have "
            f"{nodes}"
        )


def check_room(options: Mapping[str, Any], n_workers: int, others: Mapping[str, float]) -> None:
    """
    :param options: Options of a worker's actor.
    :param n_workers: Workers that are to run at once.
    :param others: What the actors of the other open pools of this process ask for, by Ray's resource names.
    :raises ValueError: if the whole cluster has less of a resource than ``n_workers`` actors and the others ask
        for (the last ones would wait for it until the pool's start timeout).
    """
    available = ray.cluster_resources()
    for name, amount in _resources(options).items():
        wanted = n_workers * amount + others.get(name, 0)
        if wanted > available.get(name, 0):
            held = f" (other lit_sb3 pools of this process hold {others[name]:g})" if others.get(name) else ""
            raise ValueError(
                f"worker_resources: {n_workers} workers ask for {n_workers * amount:g} {name} in all and the Ray "
                f"cluster has {available.get(name, 0):g}{held}: use fewer workers or smaller worker_resources"
            )


def _resources(options: Mapping[str, Any]) -> dict[str, float]:
    """:return: What one actor with ``options`` asks for, by Ray's resource names."""
    wanted = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0), "memory": options.get("memory", 0)}
    return {name: amount for name, amount in {**wanted, **options.get("resources", {})}.items() if amount > 0}
