"""Numpy arrays in shared memory: created (and unlinked) by the main process, opened by workers by name."""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from lit_sb3.checks import check_positive_int
from lit_sb3.workers.arrays import ArrayHandle, ArrayPublisher, SupportsClose
from lit_sb3.workers.segment_names import new_segment_name, remove_orphaned_segments

if sys.platform != "win32":  # Windows frees a block with its last handle: nothing there outlives its process
    import _posixshmem


@dataclass(frozen=True)
class SharedArrayHandle:
    """
    Picklable reference to a :class:`SharedArray`.

    :param name: Name of the shared memory block.
    :param shape: Shape of the array.
    :param dtype: Numpy dtype string.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str

    def open(self) -> tuple[shared_memory.SharedMemory, np.ndarray]:
        """
        Open the array in another process without taking ownership: the creator alone unlinks it.

        :return: The shared memory block (keep it alive as long as the array) and the array view.
        """
        if sys.version_info >= (3, 13):
            block = shared_memory.SharedMemory(self.name, track=False)
        else:
            with _tracking_lock, _resource_tracking_disabled():
                block = shared_memory.SharedMemory(self.name)
        return block, np.ndarray(self.shape, dtype=self.dtype, buffer=block.buf)


#: Held while registration is switched off, and while blocks are created: a worker thread opening a block must not
#: keep a block created meanwhile by another thread of the process from being registered.
_tracking_lock = threading.Lock()


@contextlib.contextmanager
def _resource_tracking_disabled() -> Iterator[None]:
    # Before Python 3.13, opening a block registers it with the resource tracker, which would then unlink it
    # when this process exits, under the feet of its owner.
    register = resource_tracker.register
    resource_tracker.register = lambda name, rtype: None
    try:
        yield
    finally:
        resource_tracker.register = register


class SharedArray:
    """
    A numpy array in a shared memory block owned by this process.

    :param shape: Shape of the array.
    :param dtype: Numpy dtype.
    """

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype | type) -> None:
        self.dtype = np.dtype(dtype)
        nbytes = max(1, int(np.prod(shape)) * self.dtype.itemsize)
        with _tracking_lock:
            block = self._create_block(nbytes)
        self.array: np.ndarray = np.ndarray(shape, dtype=self.dtype, buffer=block.buf)
        self.handle = SharedArrayHandle(block.name, tuple(shape), self.dtype.str)

    def _create_block(self, nbytes: int) -> shared_memory.SharedMemory:
        """
        Create the block under a name chosen, and registered with the resource tracker, before the segment exists:
        a process killed at any point after the creation leaves the segment to the tracker (a name registered but
        never created only makes it warn), and a creation interrupted anywhere (a Ctrl-C between the segment's
        creation and its sizing or mapping) unlinks what it made.

        :param nbytes: Size of the block.
        :return: The block, unlinked when this array is closed, garbage collected, or at exit, whichever comes first.
        """
        remove_orphaned_segments()
        while True:
            name = new_segment_name()
            tracked_name = None  # registered by this call: "/name"
            block = None
            try:
                if sys.platform != "win32":  # Windows frees a block with its last handle
                    resource_tracker.register(f"/{name}", "shared_memory")
                    tracked_name = f"/{name}"
                block = shared_memory.SharedMemory(name, create=True, size=nbytes)
                self._release = weakref.finalize(self, _release, block)
                return block
            except FileExistsError:
                if tracked_name is not None:
                    resource_tracker.unregister(tracked_name, "shared_memory")
                continue  # another segment's name
            except BaseException:
                if block is not None:
                    _release(block)  # unregistered as it is unlinked
                elif tracked_name is not None:
                    with contextlib.suppress(FileNotFoundError):
                        _posixshmem.shm_unlink(tracked_name)
                    resource_tracker.unregister(tracked_name, "shared_memory")
                raise

    def close(self) -> None:
        """Release and unlink the block (idempotent); :attr:`array` is empty from then on."""
        self.array = np.empty((0,), dtype=self.dtype)  # the view would keep the block mapped and its file open
        self._release()


def _release(block: shared_memory.SharedMemory) -> None:
    with contextlib.suppress(BufferError):  # a view still alive keeps the mapping; the name goes anyway
        block.close()
    with contextlib.suppress(FileNotFoundError):
        block.unlink()


class SharedMemoryPublisher(ArrayPublisher):
    """Publishes arrays in one shared memory block, reused while the arrays fit in it."""

    def __init__(self) -> None:
        self._shared: SharedArray | None = None

    def publish(self, array: np.ndarray) -> SharedArrayHandle:
        shared = self._shared
        fits = (
            shared is not None
            and shared.dtype == array.dtype
            and shared.array.shape[1:] == array.shape[1:]
            and shared.array.shape[0] >= array.shape[0]
        )
        if not fits:
            self.close()
            shared = self._shared = SharedArray(array.shape, array.dtype)
        assert shared is not None
        shared.array[: array.shape[0]] = array  # workers read the rows they are told about
        return shared.handle

    def close(self) -> None:
        if self._shared is not None:
            self._shared.close()
            self._shared = None


class OpenedArrays:
    """
    Cache of arrays opened in a worker, by handle; past ``capacity``, the least recently used one is closed.

    :param capacity: Most arrays kept open at once.
    """

    def __init__(self, capacity: int = 2) -> None:
        check_positive_int("capacity", capacity)
        self._capacity = capacity
        self._opened: OrderedDict[ArrayHandle, tuple[SupportsClose, np.ndarray]] = OrderedDict()

    def get(self, handle: ArrayHandle) -> np.ndarray:
        """
        :param handle: The array to open.
        :return: A view of the shared array.
        """
        if handle in self._opened:
            self._opened.move_to_end(handle)
        else:
            while len(self._opened) >= self._capacity:
                self._close_oldest()
            self._opened[handle] = handle.open()
        return self._opened[handle][1]

    def close(self) -> None:
        """Close every opened block (the caller drops its views first)."""
        while self._opened:
            self._close_oldest()

    def _close_oldest(self) -> None:
        block, array = self._opened.popitem(last=False)[1]
        del array
        with contextlib.suppress(BufferError):
            block.close()
