"""
Runs one script of async-gym-agents (its imports already changed to lit_sb3) as ``__main__``, with its budgets
shortened: ``python -m conformance.agym_runner SCRIPT``.

The budgets are cut where the scripts' code reads them, never in their text: ``learn()`` runs at most
:data:`LEARN_STEPS` steps, an on-policy rollout left at its default size holds :data:`ON_POLICY_STEPS` steps per
environment, ``evaluate_policy`` (also EvalCallback's) runs at most :data:`EVAL_EPISODES` episodes, EvalCallback
evaluates at least every :data:`EVAL_FREQ` calls, and the slow CartPole's sleeps are :data:`SLEEP_SCALE` of theirs.
gymnasium 1 renamed ``LunarLanderContinuous-v2`` to ``-v3``: the old id is registered for it.
"""

from __future__ import annotations

import functools
import runpy
import sys
from typing import Any

import gymnasium as gym
import stable_baselines3.common.callbacks as sb3_callbacks
import stable_baselines3.common.evaluation as sb3_evaluation
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

LEARN_STEPS = 600
ON_POLICY_STEPS = 64
EVAL_EPISODES = 2
EVAL_FREQ = 200
SLEEP_SCALE = 0.05


def _capped_learn(learn: Any) -> Any:
    @functools.wraps(learn)
    def capped(self: Any, total_timesteps: int, *args: Any, **kwargs: Any) -> Any:
        return learn(self, min(total_timesteps, LEARN_STEPS), *args, **kwargs)

    return capped


def _capped_evaluation(evaluate: Any) -> Any:
    @functools.wraps(evaluate)
    def capped(model: Any, env: Any, n_eval_episodes: int = 10, *args: Any, **kwargs: Any) -> Any:
        return evaluate(model, env, min(n_eval_episodes, EVAL_EPISODES), *args, **kwargs)

    return capped


def _on_policy_init(init: Any) -> Any:
    @functools.wraps(init)
    def shortened(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("n_steps") == 2048:  # PPO's default: the scripts leave it
            kwargs["n_steps"] = ON_POLICY_STEPS
        init(self, *args, **kwargs)

    return shortened


def _eval_callback_init(init: Any) -> Any:
    @functools.wraps(init)
    def frequent(self: Any, *args: Any, eval_freq: int = 10_000, **kwargs: Any) -> None:
        init(self, *args, eval_freq=min(eval_freq, EVAL_FREQ), **kwargs)

    return frequent


def _quick_sleeps(init: Any) -> Any:
    @functools.wraps(init)
    def quick(self: Any, min_sleep: float = 0.01, max_sleep: float = 0.1, **kwargs: Any) -> None:
        init(self, min_sleep=min_sleep * SLEEP_SCALE, max_sleep=max_sleep * SLEEP_SCALE, **kwargs)

    return quick


def shorten_budgets() -> None:
    """Patch the budgets the scripts' code reads (see the module's docstring)."""
    from async_gym_agents.envs.slow_cartpole import SlowCartPoleEnv  # the fixtures: on the path in the subprocess only

    OnPolicyAlgorithm.learn = _capped_learn(OnPolicyAlgorithm.learn)  # type: ignore[method-assign]
    OffPolicyAlgorithm.learn = _capped_learn(OffPolicyAlgorithm.learn)  # type: ignore[method-assign]
    OnPolicyAlgorithm.__init__ = _on_policy_init(OnPolicyAlgorithm.__init__)  # type: ignore[method-assign]
    sb3_evaluation.evaluate_policy = _capped_evaluation(sb3_evaluation.evaluate_policy)
    sb3_callbacks.evaluate_policy = _capped_evaluation(sb3_callbacks.evaluate_policy)
    sb3_callbacks.EvalCallback.__init__ = _eval_callback_init(sb3_callbacks.EvalCallback.__init__)  # type: ignore[method-assign]
    SlowCartPoleEnv.__init__ = _quick_sleeps(SlowCartPoleEnv.__init__)  # type: ignore[method-assign]
    if "LunarLanderContinuous-v2" not in gym.registry:
        gym.register(
            "LunarLanderContinuous-v2",
            entry_point="gymnasium.envs.box2d.lunar_lander:LunarLander",
            kwargs={"continuous": True},
            max_episode_steps=1000,
            reward_threshold=200,
        )


if __name__ == "__main__":
    shorten_budgets()
    runpy.run_path(sys.argv[1], run_name="__main__")
