"""The lockstep (reproducible) episode worker on its own: a task resumed on a fresh worker, from the resume arguments
of its last delivered episode, runs exactly the episodes the undisturbed worker ran."""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO

from lit_sb3.collection import CollectionPlan
from lit_sb3.collection.episodes import EpisodePacket
from lit_sb3.collection.lockstep import LockstepEpisodeWorker
from lit_sb3.collection.weights import WeightBoard, acting_module, flat_weights
from lit_sb3.envs.multi_env import IndexableMultiEnv
from lit_sb3.workers.shared_array import SharedMemoryPublisher

#: Environment steps of each rollout.
ROLLOUT_STEPS = 40


class Emitted:
    """What a worker emitted: each episode with its task's resume arguments."""

    def __init__(self) -> None:
        self.episodes: list[tuple[EpisodePacket, tuple[Any, ...] | None]] = []

    def __call__(self, request_id: int, unit: int, value: Any, resume_args: tuple[Any, ...] | None) -> None:
        assert unit == value.episode_index
        self.episodes.append((value, resume_args))


def lockstep_worker(model: PPO) -> tuple[LockstepEpisodeWorker, Emitted]:
    plan = CollectionPlan.for_algorithm(model, base_seed=7, lockstep=True)
    env_fns = [partial(gym.make, "CartPole-v1")]
    worker = LockstepEpisodeWorker(env_fns, model.policy, plan.acting, max_envs=1, progress=plan.progress(0))
    emitted = Emitted()
    worker.attach_emitter(emitted)
    return worker, emitted


def advance_until(worker: LockstepEpisodeWorker, emitted: Emitted, rollout: int) -> None:
    """Advance the worker until it delivered the last episode of ``rollout``."""
    for _ in range(10_000):
        if any(packet.rollout_index == rollout and packet.closes_rollout for packet, _ in emitted.episodes):
            return
        worker.advance()
    raise AssertionError(f"rollout {rollout} was never closed: the worker waits for weights it cannot find")


def same_episode(first: EpisodePacket, second: EpisodePacket) -> bool:
    return (
        (first.episode_index, first.rollout_index, first.closes_rollout, first.last_version)
        == (second.episode_index, second.rollout_index, second.closes_rollout, second.last_version)
        and np.array_equal(first.observations, second.observations)
        and np.array_equal(first.actions, second.actions)
        and np.array_equal(first.log_probs, second.log_probs)  # type: ignore[arg-type]
        and np.array_equal(first.values, second.values)  # type: ignore[arg-type]
    )


def test_a_resumed_environment_runs_the_episodes_of_the_undisturbed_one_with_the_weights_before_the_last() -> None:
    env = IndexableMultiEnv([partial(gym.make, "CartPole-v1")])
    model = PPO("MlpPolicy", env, n_steps=ROLLOUT_STEPS, batch_size=ROLLOUT_STEPS, seed=0)
    board = WeightBoard((SharedMemoryPublisher(), SharedMemoryPublisher()), min_interval=0.0)
    progress = CollectionPlan.for_algorithm(model, base_seed=7, lockstep=True).progress(0)
    undisturbed, emitted = lockstep_worker(model)
    fresh, resumed = lockstep_worker(model)
    try:
        undisturbed.submit(0, "collect", (0,))
        advance_until(undisturbed, emitted, rollout=1)  # rollouts 0 and 1 are acted by the initial weights
        # Versions 1 and 2 are published: rollout 2 is acted by version 1, rollout 3 by version 2.
        initial = flat_weights(acting_module(model.policy))
        perturbation = np.random.default_rng(0).normal(size=initial.shape)
        for version in (1, 2):
            handle = board.write(version, initial + 0.5 * version * perturbation)
            undisturbed.sync(version, handle, progress, board.previous)
        advance_until(undisturbed, emitted, rollout=3)
        # A worker that died after rollout 1 is replaced by one told (by the pool's replay) of the last publication
        # only, and of the one before it; its task resumes from the resume arguments of the last episode delivered.
        closing = [index for index, (packet, _) in enumerate(emitted.episodes) if packet.closes_rollout][1]
        delivered = frozenset(range(closing + 1))
        resume_args = emitted.episodes[closing][1]
        assert resume_args == (0, 2, 0)  # environment 0, rollout 2, none of its steps yet
        fresh.sync(2, handle, progress, board.previous)
        fresh.submit(1, "collect", resume_args, delivered)
        advance_until(fresh, resumed, rollout=3)
    finally:
        undisturbed.close()
        fresh.close()
        board.close()
    expected = [packet for packet, _ in emitted.episodes[closing + 1 :]]
    got = [packet for packet, _ in resumed.episodes]
    assert len(got) == len(expected) >= 2
    assert {packet.last_version for packet in got} == {1, 2}
    assert all(same_episode(a, b) for a, b in zip(expected, got, strict=True))
    assert [args for _, args in resumed.episodes] == [args for _, args in emitted.episodes[closing + 1 :]]
