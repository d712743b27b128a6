"""The episode worker's progress board: each environment task keeps one row while it runs."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO

from agents.helpers import multi_env
from fixture_envs import ScalarEnv
from lit_sb3.collection import CollectionPlan
from lit_sb3.collection.episode_worker import STEPS_PER_ADVANCE, EpisodeWorker
from lit_sb3.envs.multi_env import IndexableMultiEnv


class CountedScalarEnv(ScalarEnv):
    """A :class:`ScalarEnv` that counts the steps of all its instances."""

    steps = 0

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        CountedScalarEnv.steps += 1
        return super().step(action)


class BoardRecorder(EpisodeWorker):
    """Records the row of every episode start, by environment."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.rows: dict[int, list[int]] = {}  # request id -> rows its episodes started on

    def mark_started(self, slot: int, unit_index: int, request_id: int, started_at: float | None = None) -> None:
        self.rows.setdefault(request_id, []).append(slot)
        super().mark_started(slot, unit_index, request_id, started_at)


def test_a_task_keeps_its_slot_when_another_is_cancelled_and_a_freed_slot_is_reused() -> None:
    env = multi_env("CartPole-v1", 3)
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, seed=0)
    plan = CollectionPlan.for_algorithm(model, base_seed=0)
    env_fns = [partial(gym.make, "CartPole-v1")] * 3
    worker = BoardRecorder(env_fns, model.policy, plan.acting, max_envs=3, progress=plan.progress(0))
    episodes: list[tuple[int, int]] = []
    worker.attach_emitter(lambda request_id, unit, _episode, _resume_args: episodes.append((request_id, unit)))
    try:
        for request_id in range(3):
            worker.submit(request_id, "collect", (request_id,))
        assert worker.cancel((0,)) == [0]
        for _ in range(20):  # every remaining environment ends episodes and begins new ones
            worker.advance()
        worker.submit(3, "collect", (0,))
        for _ in range(20):
            worker.advance()
    finally:
        worker.close()
    assert worker.rows[0] == [0]
    assert len(worker.rows[1]) > 1 and set(worker.rows[1]) == {1}  # not moved to row 0 by the cancel
    assert len(worker.rows[2]) > 1 and set(worker.rows[2]) == {2}
    assert set(worker.rows[3]) == {0}  # the freed row
    assert {request_id for request_id, _ in episodes} == {1, 2, 3}


def test_an_advance_hands_control_back_after_a_tenth_of_a_second_with_slow_environments() -> None:
    """32 steps of 20 ms would keep a cancel, a close or new weights waiting for 0.64 s."""
    env_fn = partial(CountedScalarEnv, length=1000, step_seconds=0.02)
    model = PPO("MlpPolicy", IndexableMultiEnv([env_fn]), n_steps=16, batch_size=16, seed=0)
    plan = CollectionPlan.for_algorithm(model, base_seed=0)
    worker = EpisodeWorker([env_fn], model.policy, plan.acting, max_envs=1, progress=plan.progress(0))
    worker.attach_emitter(lambda *_: None)
    try:
        worker.submit(0, "collect", (0,))
        before = CountedScalarEnv.steps
        worker.advance()
        steps = CountedScalarEnv.steps - before
    finally:
        worker.close()
    assert 1 <= steps <= STEPS_PER_ADVANCE // 4, steps
