"""The engine's data between the rollout and the dataset threads: finished rollouts (on-policy) or a replay buffer
(off-policy) that the rollout thread fills and the dataset thread draws train steps' data from."""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.save_util import load_from_pkl, save_to_pkl
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from lit_sb3.checks import check_non_negative_int
from lit_sb3.collection import EpisodePacket, Rollout, add_transitions, final_info, one_column_replay_buffer


class DataBuffer:
    """What both buffers share: a condition that wakes the dataset thread when data arrives."""

    def __init__(self) -> None:
        self._condition = threading.Condition()

    @staticmethod
    def for_algorithm(algorithm: BaseAlgorithm) -> DataBuffer:
        """
        :param algorithm: The algorithm of the policy group.
        :return: A :class:`RolloutQueue` for an on-policy algorithm, a :class:`ReplayData` over its replay buffer
            (rebuilt with one environment column, since episodes arrive one by one) for an off-policy one.
        """
        if not isinstance(algorithm, OffPolicyAlgorithm):
            return RolloutQueue()
        replay_buffer = algorithm.replay_buffer
        assert replay_buffer is not None
        algorithm.replay_buffer = replay_buffer = one_column_replay_buffer(
            replay_buffer, algorithm.replay_buffer_kwargs
        )
        return ReplayData(replay_buffer)


class RolloutQueue(DataBuffer):
    """
    On-policy: finished rollouts, oldest first. The rollout thread adds one when the dataset thread asks for one
    (plus ``prefetch`` ahead): every rollout held here ages by the train steps it waits, so none by default.

    :param prefetch: Rollouts taken from the collection before the dataset thread asks for them.
    """

    def __init__(self, prefetch: int = 0) -> None:
        super().__init__()
        check_non_negative_int("prefetch", prefetch)
        self.prefetch = prefetch
        self._rollouts: deque[Rollout] = deque()
        self._takers = 0

    def wait_for_room(self, timeout: float) -> bool:
        """
        :param timeout: Seconds to wait at most.
        :return: Whether a rollout is wanted.
        """
        with self._condition:
            return self._condition.wait_for(lambda: len(self._rollouts) < self.prefetch + self._takers, timeout)

    def put(self, rollout: Rollout) -> None:
        """:param rollout: A finished rollout."""
        with self._condition:
            self._rollouts.append(rollout)
            self._condition.notify_all()

    def wait_for_rollout(self, timeout: float) -> bool:
        """
        Ask for a rollout and wait for it.

        :param timeout: Seconds to wait at most.
        :return: Whether a rollout is there.
        """
        with self._condition:
            self._takers += 1
            self._condition.notify_all()
            try:
                return self._condition.wait_for(lambda: len(self._rollouts) > 0, timeout)
            finally:
                self._takers -= 1

    def take(self) -> Rollout:
        """:return: The oldest rollout (after :meth:`wait_for_rollout` said there is one)."""
        with self._condition:
            return self._rollouts.popleft()

    def queued(self) -> list[Rollout]:
        """:return: The rollouts waiting, oldest first."""
        with self._condition:
            return list(self._rollouts)

    def restore(self, rollouts: list[Rollout]) -> None:
        """:param rollouts: What :meth:`queued` gave when a checkpoint was saved: they are taken first."""
        if not all(isinstance(rollout, Rollout) for rollout in rollouts):
            raise TypeError("restore() takes the rollouts of a checkpoint")
        with self._condition:
            self._rollouts.extendleft(reversed(rollouts))
            self._condition.notify_all()


class SampledBatches:
    """
    Off-policy: the batches of one train step, drawn from the replay buffer by the dataset thread; the algorithm's
    ``train()`` samples them in order as it would sample its replay buffer.

    :param batches: One batch per gradient step.
    :param batch_size: Their size.
    """

    def __init__(self, batches: list[ReplayBufferSamples], batch_size: int) -> None:
        self._batches = batches
        self.batch_size = batch_size
        self._next = 0

    def __len__(self) -> int:
        return len(self._batches)

    def sample(self, batch_size: int, env: Any = None) -> ReplayBufferSamples:
        """
        :param batch_size: Must be the size they were drawn with.
        :param env: Unused (observations were normalised, if at all, when drawn).
        :return: The next batch.
        """
        if batch_size != self.batch_size:
            raise ValueError(f"batch_size {batch_size} differs from the {self.batch_size} the batches were drawn with")
        batch = self._batches[self._next]
        self._next += 1
        return batch


class ReplayData(DataBuffer):
    """
    Off-policy: a Stable-Baselines3 replay buffer that the rollout thread fills episode by episode while the dataset
    thread draws batches from it (one lock: a batch never holds a half-written transition).

    :param replay_buffer: The algorithm's replay buffer, with one environment column.
    """

    def __init__(self, replay_buffer: ReplayBuffer) -> None:
        super().__init__()
        if replay_buffer.n_envs != 1:
            raise ValueError(
                f"replay_buffer must have n_envs=1 (episodes arrive one by one), got {replay_buffer.n_envs}"
            )
        self.replay_buffer = replay_buffer
        self.collected_steps = 0
        self.episodes_since_draw = 0

    def add_episode(self, episode: EpisodePacket, started_at: float) -> None:
        """
        :param episode: A finished episode; its transitions go in as ``OffPolicyAlgorithm._store_transition``.
        :param started_at: When collection started (Monitor's ``t`` in the info of its last step).
        """
        with self._condition:
            add_transitions(self.replay_buffer, episode, range(episode.length), final_info(episode, started_at))
            self.collected_steps += episode.length
            self.episodes_since_draw += 1
            self._condition.notify_all()

    def wait_for_steps(self, steps: int, timeout: float) -> bool:
        """
        :param steps: Collected steps to reach.
        :param timeout: Seconds to wait at most.
        :return: Whether at least ``steps`` were collected.
        """
        with self._condition:
            return self._condition.wait_for(lambda: self.collected_steps >= steps, timeout)

    def wait_for_room(self, episodes_ahead: int, steps_for_next_draw: int, timeout: float) -> bool:
        """
        :param episodes_ahead: Episodes allowed in beyond those the last draw saw.
        :param steps_for_next_draw: Collected steps the next train step needs (there is room until they are in).
        :param timeout: Seconds to wait at most.
        :return: Whether another episode may go in.
        """
        with self._condition:
            return self._condition.wait_for(
                lambda: self.episodes_since_draw <= episodes_ahead or self.collected_steps < steps_for_next_draw,
                timeout,
            )

    def draw(self, gradient_steps: int, batch_size: int, env: Any = None) -> SampledBatches:
        """
        :param gradient_steps: Batches to draw.
        :param batch_size: Transitions per batch.
        :param env: The algorithm's ``VecNormalize``, if any.
        :return: The batches of one train step.
        """
        with self._condition:
            batches = [self.replay_buffer.sample(batch_size, env=env) for _ in range(gradient_steps)]
            self.episodes_since_draw = 0
            self._condition.notify_all()
        return SampledBatches(batches, batch_size)

    def save(self, path: Path) -> None:
        """:param path: Pickle file of the replay buffer (``BaseAlgorithm.save_replay_buffer``'s format)."""
        with self._condition:
            save_to_pkl(path, self.replay_buffer)

    def load(self, path: Path, collected_steps: int) -> None:
        """
        :param path: What :meth:`save` wrote.
        :param collected_steps: Steps collected when it was saved.
        """
        loaded = load_from_pkl(path)
        if not isinstance(loaded, ReplayBuffer):
            raise TypeError(f"{path} holds a {type(loaded).__name__}, not a replay buffer")
        with self._condition:
            self.replay_buffer.__dict__.update(loaded.__dict__)  # the algorithm keeps its reference
            self.collected_steps = collected_steps
