"""Drop-in for sb3-contrib: its ARS learns with our AsyncEval, deterministically."""

from __future__ import annotations

import numpy as np
from sb3_contrib import ARS
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3 import AsyncEval


def test_sb3_contrib_ars_learns_with_our_async_eval() -> None:
    """Returns reach the candidates they belong to: ARS climbs from the zero policy (about 9 steps) to balancing."""
    model = ARS("LinearPolicy", "CartPole-v1", seed=0)
    eval_env = make_vec_env("CartPole-v1", seed=100)
    start_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=10)
    async_eval = AsyncEval([lambda: make_vec_env("CartPole-v1") for _ in range(2)], model.policy)
    model.learn(total_timesteps=40_000, async_eval=async_eval)
    assert model.num_timesteps >= 40_000
    assert async_eval.closed  # sb3-contrib's ARS closes the pool at the end of learn()
    mean_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=10)
    assert start_return < 50.0
    assert mean_return >= 450.0


def test_sb3_contrib_determinism_with_two_workers_and_vec_normalize() -> None:
    """sb3-contrib's own determinism test (``ars_multi``) with our AsyncEval."""
    env_id, seed = "Pendulum-v1", 0
    actions: list[list[np.ndarray]] = [[], []]
    rewards: list[list[np.ndarray]] = [[], []]
    for run in range(2):
        model = ARS("MlpPolicy", env_id, seed=seed, n_delta=2, learning_rate=1e-3, policy_kwargs=dict(net_arch=[16]))
        async_eval = AsyncEval(
            [lambda: VecNormalize(make_vec_env(env_id, seed=seed, n_envs=1)) for _ in range(2)], model.policy
        )
        model.learn(total_timesteps=256, async_eval=async_eval)
        env = model.get_env()
        assert env is not None
        obs = env.reset()
        for _ in range(100):
            action, _ = model.predict(obs, deterministic=False)
            obs, reward, _, _ = env.step(action)
            actions[run].append(action)
            rewards[run].append(reward)
    assert sum(actions[0]) == sum(actions[1])
    assert sum(rewards[0]) == sum(rewards[1])
