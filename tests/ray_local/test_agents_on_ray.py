"""Async episode collection for gradient agents, and the async engine, with workers as Ray actors."""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("ray", reason="the Ray backend's tests need Ray: pip install 'lit_sb3[ray]'")
from agents.helpers import SMALL_NETWORK, multi_env
from agents.test_async_behaviour import reproducible_ppo
from engine.helpers import small_ppo_engine
from stable_baselines3 import PPO, SAC

from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.engine import AsyncRLEngine, DataBuffer, EngineConfig, EnvGroup, PolicyGroup


def test_reproducible_ppo_on_ray_actors_gives_the_weights_of_local_processes() -> None:
    on_ray, report = reproducible_ppo(use_mp=True, n_workers=2, backend="ray")
    local, _ = reproducible_ppo(use_mp=True, n_workers=2)
    np.testing.assert_array_equal(on_ray, local)
    assert report["transport"]["backend"] == "ray"
    assert report["policy"]["lag_max"] == 1
    assert report["policy"]["publications"] == report["trainer"]["train_calls"] - 1  # each version but the last


def test_sac_collects_on_ray_actors_with_fresh_weights() -> None:
    model = get_injected_agent(SAC)(
        "MlpPolicy",
        multi_env("Pendulum-v1", 2),
        use_mp=True,
        backend="ray",
        n_workers=2,
        learning_starts=200,
        batch_size=64,
        seed=0,
        policy_kwargs=SMALL_NETWORK,
    )
    try:
        model.learn(1200)
        report = model.get_profiler_report()
    finally:
        model.shutdown()
    assert model.num_timesteps >= 1200
    assert report["worker"]["steps"][0] > 0 and report["worker"]["steps"][1] > 0
    assert report["policy"]["publications"] >= 2
    assert report["policy"]["lag_max"] < report["policy"]["version"]  # workers acted with published weights


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"backend": "ray"}, "pass use_mp=True"),
        ({"use_mp": True, "backend": "dask"}, "backend must be None"),
        ({"use_mp": True, "ray_address": "auto"}, "need backend='ray'"),
    ],
)
def test_bad_backend_choices_are_refused_at_construction(keywords: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_injected_agent(PPO)("MlpPolicy", multi_env("CartPole-v1", 1), **keywords)


def test_the_async_engine_collects_and_evaluates_on_ray_actors() -> None:
    engine = small_ppo_engine(AsyncRLEngine, backend="ray", total_env_steps=2000, eval_interval=1000, eval_episodes=2)
    summary = engine.run()
    assert summary["env_steps"] >= 2000 and summary["train_steps"] >= 1
    assert engine.evaluations and all(8 <= evaluation["mean_return"] <= 500 for evaluation in engine.evaluations)


def test_the_engine_takes_the_ray_keywords_and_its_evaluator_counts_in_the_room() -> None:
    def engine(**ray_keywords: Any) -> AsyncRLEngine:
        group = EnvGroup(
            [partial(gym.make, "CartPole-v1") for _ in range(2)], backend="ray", n_workers=2, **ray_keywords
        )
        model = PPO("MlpPolicy", group.env, seed=0, n_steps=32, batch_size=64, n_epochs=1)
        config = EngineConfig(
            total_env_steps=600, seed=0, verbose=False, log_formats=(), eval_interval=300, eval_episodes=1
        )
        return AsyncRLEngine(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model))

    # 2 collection actors take the fixture's 2 CPUs: the evaluator's is refused at once, not left waiting for one.
    with pytest.raises(ValueError, match=r"the Ray cluster has 2 \(other lit_sb3 pools of this process hold 2\)"):
        engine().run()
    ran = engine(worker_resources={"num_cpus": 0.5})
    summary = ran.run()
    assert summary["env_steps"] >= 600 and len(ran.evaluations) >= 1
