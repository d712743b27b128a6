"""Finished episodes into Stable-Baselines3 replay buffers, for the off-policy agents and engines."""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.her.her_replay_buffer import HerReplayBuffer

from lit_sb3.collection.episodes import EpisodePacket
from lit_sb3.collection.observations import select


def one_column_replay_buffer(replay_buffer: ReplayBuffer, replay_buffer_kwargs: dict[str, Any]) -> ReplayBuffer:
    """
    :param replay_buffer: An algorithm's replay buffer.
    :param replay_buffer_kwargs: The extra arguments it was built with.
    :return: It, or the same buffer with one environment column: collected episodes arrive one by one, not in
        lockstep across environments, so their transitions go in one at a time (a ``HerReplayBuffer`` keeps its
        environment, through which it computes the rewards of relabelled goals).
    """
    if replay_buffer.n_envs == 1:
        return replay_buffer
    if isinstance(replay_buffer, HerReplayBuffer):
        replay_buffer_kwargs = {**replay_buffer_kwargs, "env": replay_buffer.env}
    return type(replay_buffer)(
        replay_buffer.buffer_size,
        replay_buffer.observation_space,
        replay_buffer.action_space,
        device=replay_buffer.device,
        n_envs=1,
        optimize_memory_usage=replay_buffer.optimize_memory_usage,
        **replay_buffer_kwargs,
    )


def add_transitions(
    replay_buffer: ReplayBuffer, episode: EpisodePacket, steps: range, last_info: dict[str, Any]
) -> None:
    """
    Add steps of a finished episode to a replay buffer with one environment column, as
    ``OffPolicyAlgorithm._store_transition`` does: the next observation of the last step is the terminal one, and
    ``TimeLimit.truncated`` in its info tells a time limit from a terminal state. A ``HerReplayBuffer`` takes an
    episode's steps in order, so that it knows where the episode starts and ends.

    :param replay_buffer: The buffer.
    :param episode: The episode.
    :param steps: Which of its steps.
    :param last_info: The info dict of its last step (see :func:`~lit_sb3.collection.rollout.final_info`).
    """
    last = episode.length - 1
    for step in steps:
        done = step == last
        replay_buffer.add(
            select(episode.observations, [step]),  # type: ignore[arg-type]
            select(episode.observations, [step + 1]),  # type: ignore[arg-type]
            episode.actions[step][None],
            np.asarray([episode.rewards[step]]),
            np.asarray([done]),
            [last_info if done else episode.infos[step]],
        )
