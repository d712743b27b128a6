"""The assembler: a background thread that takes the stream of finished episodes, drops those too old to train on,
and turns the rest into on-policy rollouts (or hands them one ahead, off-policy), one ahead of the trainer. Where the
trainer normalises with ``VecNormalize`` statistics, a rollout's episodes are counted in them and the rollout built
when the trainer takes it, on its thread, so that the statistics only ever hold what was trained on."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from lit_sb3.collection.episodes import EpisodePacket
from lit_sb3.collection.rollout import EpisodeSegment, Rollout, RolloutSpec, build_rollout
from lit_sb3.collection.statistics import NormalizationStatistics
from lit_sb3.workers.stream import Stream, StreamItem

#: Seconds a wait of the assembler or the trainer lasts before it checks whether collection goes on.
WAIT_SLICE = 0.05


@dataclass(frozen=True)
class UncountedRollout:
    """
    The episodes (or parts of them) of an on-policy rollout, not yet counted in the trainer's ``VecNormalize``
    statistics.

    :param segments: The segments, in the order they are concatenated.
    """

    segments: list[EpisodeSegment]


@dataclass
class Received:
    """What the assembler received, per worker and in all."""

    episodes_per_worker: list[int]
    steps_per_worker: list[int]
    stale_episodes: int = 0
    stale_steps: int = 0

    @property
    def steps(self) -> int:
        """Steps of every episode received."""
        return sum(self.steps_per_worker)


class EpisodeAssembler:
    """
    Runs in its own thread from construction until :meth:`stop`.

    :param stream: The collection's stream of :class:`~lit_sb3.collection.episodes.EpisodePacket` s.
    :param n_workers: Number of workers feeding it.
    :param rollout_spec: On-policy: how rollouts are built; None to hand episodes over one by one.
    :param lockstep_envs: Reproducible collection: the number of environments whose episodes make each rollout
        (see :mod:`lit_sb3.collection.lockstep`); None for free-running collection.
    :param spaces_: The environments' observation and action spaces.
    :param statistics: The trainer's ``VecNormalize`` statistics, if any (on-policy rollouts count their episodes
        in them as they are built).
    :param max_policy_lag: Episodes begun by weights more than this many versions behind :func:`current_version`
        are dropped (counted); None for no bound.
    :param current_version: The version of the trainer's weights now.
    :param acknowledge: Called with each episode's stream item once it is in: when received, for rollouts; when it
        is dropped as stale, for episodes handed over one by one (the trainer acknowledges those it takes, see
        :meth:`take`).
    :param started_at: When collection started (Monitor's ``t``).
    """

    def __init__(
        self,
        stream: Stream,
        n_workers: int,
        *,
        rollout_spec: RolloutSpec | None,
        lockstep_envs: int | None,
        spaces_: tuple[spaces.Space, spaces.Space],
        statistics: NormalizationStatistics | None,
        max_policy_lag: int | None,
        current_version: Callable[[], int],
        acknowledge: Callable[[StreamItem], None],
        started_at: float,
    ) -> None:
        self.stream = stream
        self.rollout_spec = rollout_spec
        self.lockstep_envs = lockstep_envs
        self.spaces = spaces_
        self.statistics = statistics
        self.max_policy_lag = max_policy_lag
        self.current_version = current_version
        self.acknowledge = acknowledge
        self.started_at = started_at
        self.received = Received([0] * n_workers, [0] * n_workers)
        self.error: BaseException | None = None
        self._ready: queue.Queue[Rollout | UncountedRollout | StreamItem] = queue.Queue(maxsize=1)
        self._stopping = threading.Event()
        self._taken = threading.Event()
        self._thread = threading.Thread(target=self._assemble, name="lit-sb3-episode-assembler", daemon=True)
        self._thread.start()

    @property
    def ready(self) -> bool:
        """Whether the next rollout or episode is ready (:meth:`take` returns it without waiting)."""
        return not self._ready.empty()

    def wait_ready(self, raise_failure: Callable[[], None]) -> None:
        """
        Wait until the next rollout or episode is ready (for the one thread that takes them).

        :param raise_failure: Raises the collection's failure, if any (checked while waiting).
        """
        ready = self._ready
        while True:
            raise_failure()
            with ready.not_empty:
                if ready.queue or (ready.not_empty.wait(WAIT_SLICE) and ready.queue):
                    return

    def take(self, raise_failure: Callable[[], None]) -> Rollout | StreamItem:
        """
        :param raise_failure: Raises the collection's failure, if any (checked while waiting).
        :return: The next rollout, or off-policy the stream item of the next episode, not acknowledged (waits for
            it; a rollout is counted in the statistics and built here, on the caller's thread, if the trainer
            normalises).
        """
        while True:
            raise_failure()
            try:
                item = self._ready.get(timeout=WAIT_SLICE)
            except queue.Empty:
                continue
            self._taken.set()
            if isinstance(item, StreamItem):
                return item
            return self.build(item.segments) if isinstance(item, UncountedRollout) else item

    def train_rewards(self, segment: EpisodeSegment) -> np.ndarray:
        """
        Count a rollout's segment of an episode in the ``VecNormalize`` statistics (if they are being trained).

        :param segment: The segment, as it is consumed.
        :return: Its training rewards, normalised as ``VecNormalize`` would (with the time-limit bootstrap, or the
            bootstrap at the cut).
        """
        spec = self.rollout_spec
        assert spec is not None
        packet = segment.packet
        normalized = self.statistics.count(packet, segment.start, segment.stop) if self.statistics is not None else None
        if normalized is None:
            return segment.train_rewards(packet.train_rewards[segment.start : segment.stop], spec.gamma)
        if segment.ends_episode:
            normalized[-1] += spec.gamma * packet.terminal_value
        return segment.train_rewards(normalized, spec.gamma)

    def stop(self) -> None:
        """Stop the thread (once the stream is cancelled, it ends within a wait slice)."""
        self._stopping.set()
        if threading.current_thread() is not self._thread:  # a collected agent's finaliser may run on it
            self._thread.join(5)

    # ------------------------------------------------------------------------------------------------- thread

    def _assemble(self) -> None:
        try:
            if self.lockstep_envs is not None:
                self._assemble_lockstep(self.lockstep_envs)
                return
            gathered: list[EpisodeSegment] = []
            steps = 0
            for item in self._packets():
                packet: EpisodePacket = item.value
                if self._stale(packet):
                    self.acknowledge(item)
                    continue
                if self.rollout_spec is None:
                    self._hand_over(item)  # acknowledged by the trainer
                    continue
                self.acknowledge(item)
                gathered.append(EpisodeSegment.whole(packet))
                steps += packet.length
                while steps >= self.rollout_spec.target_steps:
                    excess = steps - self.rollout_spec.target_steps if self.rollout_spec.split_episodes else 0
                    rest: list[EpisodeSegment] = []
                    if excess:  # the last episode's steps beyond the target begin the next rollout
                        head, tail = gathered[-1].split(gathered[-1].length - excess)
                        gathered[-1], rest = head, [tail]
                    self._hand_over(self.build(gathered) if self.statistics is None else UncountedRollout(gathered))
                    gathered, steps = rest, excess
                    # One rollout ahead, no more: the next one starts once the trainer took this one.
                    while not self._taken.wait(WAIT_SLICE) and not self._stopping.is_set():
                        pass
        except BaseException as exc:
            if not self._stopping.is_set():
                self.error = exc

    def _assemble_lockstep(self, n_envs: int) -> None:
        """Rollout ``r`` is every environment's episodes of rollout ``r``, ordered by environment and episode."""
        bins: dict[int, list[EpisodePacket]] = {}
        closed: dict[int, int] = {}
        next_rollout = 0
        for item in self._packets():
            self.acknowledge(item)
            packet: EpisodePacket = item.value
            bins.setdefault(packet.rollout_index, []).append(packet)
            closed[packet.rollout_index] = closed.get(packet.rollout_index, 0) + packet.closes_rollout
            while closed.get(next_rollout, 0) == n_envs:
                episodes = sorted(bins.pop(next_rollout), key=lambda p: (p.env_index, p.episode_index))
                del closed[next_rollout]
                self._hand_over(self.build([EpisodeSegment.whole(packet) for packet in episodes]))
                next_rollout += 1

    def _stale(self, packet: EpisodePacket) -> bool:
        if self.max_policy_lag is None or self.current_version() - packet.first_version <= self.max_policy_lag:
            return False
        self.received.stale_episodes += 1
        self.received.stale_steps += packet.length
        return True

    def _packets(self) -> Iterator[StreamItem]:
        """The episodes of the stream, counted per worker, until the stream ends or the assembler stops."""
        while not self._stopping.is_set():
            try:
                item = self.stream.get(timeout=WAIT_SLICE)
            except queue.Empty:
                continue
            if item is None:
                return
            packet: EpisodePacket = item.value
            self.received.episodes_per_worker[item.worker_index] += 1
            self.received.steps_per_worker[item.worker_index] += packet.length
            yield item

    def _hand_over(self, item: Rollout | UncountedRollout | StreamItem) -> None:
        self._taken.clear()
        while not self._stopping.is_set():
            try:
                self._ready.put(item, timeout=WAIT_SLICE)
                return
            except queue.Full:
                continue

    def build(self, segments: list[EpisodeSegment]) -> Rollout:
        """
        :param segments: An on-policy rollout's episodes or parts of them (counted in the statistics now, if any).
        :return: The rollout, with its returns and advantages.
        """
        spec = self.rollout_spec
        assert spec is not None
        train_rewards = [self.train_rewards(segment) for segment in segments]
        observation_space, action_space = self.spaces
        return build_rollout(
            segments,
            train_rewards,
            spec,
            observation_space=observation_space,
            action_space=action_space,
            started_at=self.started_at,
        )
