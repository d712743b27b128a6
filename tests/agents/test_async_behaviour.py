"""What an injected collector must get right inside Stable-Baselines3 (each where the reference falls short)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import DQN, PPO, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from agents.agent_envs import AlternatingNoise, OddEnv
from agents.helpers import SMALL_NETWORK, EpisodeRecorder, multi_env
from lit_sb3.agents.async_agent import get_injected_agent
from lit_sb3.collection.episode_worker import STEPS_PER_ADVANCE
from lit_sb3.envs.multi_env import IndexableMultiEnv


def test_off_policy_workers_leave_the_warm_up_when_the_trainer_passes_learning_starts() -> None:
    recorder = EpisodeRecorder()
    model = get_injected_agent(SAC)(
        "MlpPolicy",
        multi_env("Pendulum-v1", 1),
        use_mp=False,
        learning_starts=400,
        max_episodes_in_buffer=1,
        seed=0,
        policy_kwargs=SMALL_NETWORK,
    )
    try:
        model.learn(2400, callback=recorder)
    finally:
        model.shutdown()
    random_steps = [final["collection"]["random_steps"] for final in recorder.finals]
    assert random_steps[:2] == [200, 200]  # warm-up: uniform random actions
    assert random_steps[-3:] == [0, 0, 0]  # the workers saw num_timesteps pass learning_starts


#: Pendulum with episodes of 50 steps: a warm-up share may span episodes.
short_pendulum = partial(gym.make, "Pendulum-v1", max_episode_steps=50)


@pytest.mark.parametrize(
    ("make_env", "learning_starts", "share"),
    [
        (lambda: DummyVecEnv([short_pendulum]), 80, 80),
        (lambda: DummyVecEnv([short_pendulum for _ in range(4)]), 100, 25),
        (lambda: IndexableMultiEnv([short_pendulum for _ in range(4)]), 102, 26),  # one environment for SB3
    ],
    ids=["one-env", "vec-env", "indexable-multi-env"],
)
def test_the_off_policy_warm_up_is_learning_starts_steps_each_environment_its_share(
    make_env: Callable[[], VecEnv], learning_starts: int, share: int
) -> None:
    # Stable-Baselines3 acts at random while num_timesteps < learning_starts: each of n_envs environments takes its
    # first ceil(learning_starts / n_envs) steps at random, whatever its episodes' ends.
    recorder = EpisodeRecorder()
    model = get_injected_agent(SAC)(
        "MlpPolicy", make_env(), use_mp=False, learning_starts=learning_starts, batch_size=32, seed=0
    )
    try:
        model.learn(400, callback=recorder)
    finally:
        model.shutdown()
    random_steps: dict[int, list[int]] = {}
    for final in recorder.finals:
        random_steps.setdefault(final["collection"]["env_index"], []).append(final["collection"]["random_steps"])
    assert len(random_steps) == (1 if share == learning_starts else 4)
    for steps in random_steps.values():
        assert sum(steps) == share
        assert steps == [min(50, max(0, share - 50 * episode)) for episode in range(len(steps))], random_steps


def test_dqn_workers_explore_with_the_trainers_epsilon() -> None:
    recorder = EpisodeRecorder()
    model = get_injected_agent(DQN)(
        "MlpPolicy",
        multi_env("CartPole-v1", 2),
        use_mp=False,
        learning_starts=0,
        exploration_fraction=0.4,
        exploration_final_eps=0.0,
        max_episodes_in_buffer=2,
        seed=0,
    )
    try:
        model.learn(5000, callback=recorder)
    finally:
        model.shutdown()
    fractions = [final["collection"]["random_steps"] / final["episode"]["l"] for final in recorder.finals]
    assert np.mean(fractions[:5]) > 0.8  # epsilon starts at 1
    assert np.mean(fractions[-5:]) < 0.05  # and reaches 0 at 40% of the run


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
def test_action_noise_belongs_to_each_environment_and_resets_at_its_episode_ends(use_mp: bool) -> None:
    env = IndexableMultiEnv([OddEnv for _ in range(3)])
    model = get_injected_agent(TD3)(
        "MlpPolicy", env, use_mp=use_mp, n_workers=1, action_noise=AlternatingNoise(), learning_starts=1000, seed=0
    )
    try:
        model.learn(7 * 3 * 4)
    finally:
        model.shutdown()
    assert model.replay_buffer is not None
    actions = model.replay_buffer.actions[: model.replay_buffer.pos, 0, 0]
    episodes = actions.reshape(-1, 7)  # whole episodes, one after the other in the buffer
    assert (episodes == np.array([1, -1, 1, -1, 1, -1, 1], np.float32)).all()


def test_gsde_noise_is_resampled_in_the_workers() -> None:
    recorder = EpisodeRecorder()
    model = get_injected_agent(PPO)(
        "MlpPolicy",
        IndexableMultiEnv([OddEnv]),
        use_mp=False,
        use_sde=True,
        sde_sample_freq=3,
        n_steps=35,
        batch_size=35,
        learning_rate=0.0,
        seed=0,
    )
    first_actions: list[float] = []

    class FirstActions(EpisodeRecorder):
        def _on_rollout_end(self) -> None:
            rollout = self.locals["rollout"]
            first_actions.extend(float(episode.actions[1, 0]) for episode in rollout.episodes)

    try:
        model.learn(35 * 3, callback=[recorder, FirstActions()])
    finally:
        model.shutdown()
    # Same weights, same second observation: only a resampled exploration matrix changes the action taken there.
    assert len(first_actions) >= 10 and len(set(first_actions)) > 1


def test_workers_act_with_their_own_policy_copies_in_eval_mode() -> None:
    model = get_injected_agent(PPO)("MlpPolicy", multi_env("CartPole-v1", 2), use_mp=False, n_steps=16, batch_size=32)
    try:
        model.learn(64)
        assert model._collector is not None
        (description,) = model._collector.pool.descriptions
        assert description["policy_id"] != id(model.policy)
        assert description["policy_training"] is False
    finally:
        model.shutdown()


def test_weights_are_published_only_when_changed_and_at_most_once_per_interval() -> None:
    model = get_injected_agent(SAC)(
        "MlpPolicy",
        multi_env("Pendulum-v1", 1),
        use_mp=True,
        learning_starts=100,
        weight_sync_interval=0.25,
        seed=0,
        policy_kwargs=SMALL_NETWORK,
    )
    try:
        import time

        started = time.monotonic()
        model.learn(1500)
        elapsed = time.monotonic() - started
        report = model.get_profiler_report()
    finally:
        model.shutdown()
    policy = report["policy"]
    assert report["trainer"]["train_calls"] > 1000  # one gradient step per env step after the warm-up...
    assert policy["publications"] <= elapsed / 0.25 + 2  # ...but weights travel at most 4 times a second
    assert policy["publications"] >= 2 and policy["published_version"] > 0
    assert policy["lag_mean"] > 0 and policy["lag_max"] >= policy["lag_p99"] >= policy["lag_mean"]


def test_the_buffer_bound_and_the_put_timeout() -> None:
    class SlowTrainer(EpisodeRecorder):
        def _on_rollout_end(self) -> None:
            import time

            time.sleep(0.3)

    waiting = get_injected_agent(PPO)(
        "MlpPolicy", multi_env("CartPole-v1", 4), use_mp=False, n_steps=32, batch_size=32, max_episodes_in_buffer=2
    )
    dropping = get_injected_agent(PPO)(
        "MlpPolicy",
        multi_env("CartPole-v1", 4),
        use_mp=False,
        n_steps=32,
        batch_size=32,
        max_episodes_in_buffer=2,
        queue_put_timeout=0.01,
    )
    try:
        waiting.learn(300, callback=SlowTrainer())
        dropping.learn(300, callback=SlowTrainer())
        waited, dropped = waiting.get_profiler_report(), dropping.get_profiler_report()
    finally:
        waiting.shutdown()
        dropping.shutdown()
    assert waited["buffer"]["episodes_dropped"] == 0
    assert dropped["buffer"]["episodes_dropped"] > 0  # counted, and reported
    # Without a put timeout the workers' episodes wait for room as long as it takes; with one they wait no longer
    # than the timeout before they are dropped.
    assert waited["buffer"]["avg_push_wait_seconds"] > dropped["buffer"]["avg_push_wait_seconds"]
    for report in (waited, dropped):
        assert report["buffer"]["buffered_episodes"] <= 2 and 0 <= report["transport"]["utilization"] <= 1


@pytest.mark.timeout(120)
def test_episodes_dropped_for_want_of_room_free_their_place_in_flight() -> None:
    class SlowTrainer(EpisodeRecorder):
        def _on_rollout_end(self) -> None:
            import time

            time.sleep(0.3)

    # Rollouts of one episode or so: two episodes in flight at most, which dropped episodes must give back.
    model = get_injected_agent(PPO)(
        "MlpPolicy",
        multi_env("CartPole-v1", 4),
        use_mp=False,
        n_steps=8,
        batch_size=8,
        max_episodes_in_buffer=2,
        queue_put_timeout=0.01,
    )
    try:
        model.learn(300, callback=SlowTrainer())
        report = model.get_profiler_report()
    finally:
        model.shutdown()
    assert model.num_timesteps >= 300 and report["buffer"]["episodes_dropped"] > 0


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
def test_off_policy_workers_begin_an_episode_as_the_trainer_nears_the_end_of_the_one_before(use_mp: bool) -> None:
    # One Pendulum (200-step episodes), one gradient step per step: the trainer is far slower than the worker.
    model = get_injected_agent(SAC)(
        "MlpPolicy",
        multi_env("Pendulum-v1", 1),
        use_mp=use_mp,
        learning_starts=100,
        seed=0,
        policy_kwargs=SMALL_NETWORK,
    )
    try:
        model.learn(600)
        model.learn(600, reset_num_timesteps=False)  # threads: a new collection, the pace kept
        report = model.get_profiler_report()
    finally:
        model.shutdown()
    # An episode begins when the trainer, at its pace since it trains, is twice its acting time from the end of the
    # one before, so it is taken a few gradient steps after its first action (measured: 1 to 4). An episode begun as
    # the trainer takes the one before is taken about 200 gradient steps after its first action (one episode of
    # training), and one begun on the warm-up's pace about 100; a worker that begins episodes before the trainer
    # took the one before runs further ahead: about 550.
    assert report["policy"]["lag_mean"] <= 20
    assert report["policy"]["lag_max"] <= 50
    assert report["policy"]["version"] >= 1_000


@pytest.mark.parametrize("algorithm", [PPO, SAC], ids=lambda cls: cls.__name__)
def test_vec_normalize_statistics_count_every_consumed_observation_once(algorithm: type) -> None:
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(multi_env("Pendulum-v1", 2), gamma=0.99)
    kwargs = (
        {"n_steps": 64, "batch_size": 64}
        if algorithm is PPO
        else {"learning_starts": 100, "policy_kwargs": SMALL_NETWORK}
    )
    model = get_injected_agent(algorithm)("MlpPolicy", env, use_mp=True, seed=0, **kwargs)
    recorder = EpisodeRecorder()
    try:
        model.learn(1600, callback=recorder)
    finally:
        model.shutdown()
    # The main process never stepped its own copy of the environments past reset: every count comes from workers.
    consumed = sum(final["episode"]["l"] for final in recorder.finals)
    counted = env.obs_rms.count - 1 - 1e-4  # VecNormalize saw the local environment's reset in _setup_learn
    # Only what the algorithm consumed, as SB3 counts it: the rollout assembled ahead is counted when it is taken.
    assert counted == consumed == model.num_timesteps - (model.num_timesteps % 200 if algorithm is SAC else 0)
    assert env.ret_rms.count - 1e-4 == pytest.approx(counted)
    # Pendulum's observations are cos, sin and angular velocity: the statistics follow them.
    assert np.all(np.abs(env.obs_rms.mean[:2]) <= 1) and env.obs_rms.var[2] > 0.1


@pytest.mark.parametrize("use_mp", [False, True], ids=["threads", "processes"])
def test_each_collection_resets_its_episodes_with_new_seeds(use_mp: bool, tmp_path: Any) -> None:
    """A seeded agent's second collection (each learn() with threads, after shutdown() with processes) does not
    repeat the first one's episodes."""
    from agents.agent_envs import SeedLoggingEnv

    env = IndexableMultiEnv([partial(SeedLoggingEnv, log=str(tmp_path / "seeds.txt"))])
    model = get_injected_agent(PPO)("MlpPolicy", env, use_mp=use_mp, seed=0, n_steps=16, batch_size=16)
    collections = []
    for _ in range(2):
        try:
            model.learn(64)
        finally:
            model.shutdown()
        collections.append(set((tmp_path / "seeds.txt").read_text().split()) - {"None"})
        (tmp_path / "seeds.txt").unlink()
    assert len(collections[0]) >= 5 and len(collections[1]) >= 5
    assert not collections[0] & collections[1]


def test_a_frozen_vec_normalize_still_normalises_rewards() -> None:
    """VecNormalize(training=False) scales rewards with its fixed statistics, as Stable-Baselines3's step does."""
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(multi_env("CartPole-v1", 2), norm_obs=False, gamma=0.99)
    env.training = False
    env.ret_rms.var[...] = 100.0  # a reward of 1 becomes 0.1
    model = get_injected_agent(PPO)("MlpPolicy", env, use_mp=False, seed=0, n_steps=64, batch_size=64, n_epochs=1)
    try:
        model.learn(128)
    finally:
        model.shutdown()
    rewards = model.rollout_buffer.rewards.ravel()
    assert np.isclose(rewards, 0.1).sum() >= len(rewards) - 2  # but for the bootstrapped ends of the rollout's cuts
    assert env.ret_rms.count == 1e-4 and np.all(env.ret_rms.var == 100.0)


def reproducible_ppo(use_mp: bool, n_workers: int, **backend: Any) -> tuple[np.ndarray, dict]:
    model = get_injected_agent(PPO)(
        "MlpPolicy",
        multi_env("CartPole-v1", 3),
        use_mp=use_mp,
        n_workers=n_workers,
        **backend,
        reproducible=True,
        seed=3,
        n_steps=64,
        batch_size=64,
        n_epochs=2,
    )
    try:
        model.learn(64 * 3 * 6)
        report = model.get_profiler_report()
    finally:
        model.shutdown()
    parameters = torch.nn.utils.parameters_to_vector(model.policy.parameters()).detach().numpy()
    return parameters, report


def test_reproducible_mode_gives_identical_weights_whatever_the_workers_and_timing() -> None:
    first, report = reproducible_ppo(use_mp=True, n_workers=2)
    second, _ = reproducible_ppo(use_mp=True, n_workers=1)
    third, _ = reproducible_ppo(use_mp=False, n_workers=1)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, third)
    assert report["policy"]["lag_max"] == 1  # every rollout acted by the weights one version behind
    assert report["trainer"]["train_calls"] >= 6


def test_reproducible_mode_refuses_what_it_cannot_reproduce() -> None:
    with pytest.raises(ValueError, match="reproducible=True needs a seed"):
        get_injected_agent(PPO)("MlpPolicy", multi_env("CartPole-v1", 1), reproducible=True)
    with pytest.raises(ValueError, match="reproducible=True needs every episode: queue_put_timeout must be None"):
        get_injected_agent(PPO)(
            "MlpPolicy", multi_env("CartPole-v1", 1), reproducible=True, seed=0, queue_put_timeout=0
        )
    with pytest.raises(ValueError, match="reproducible=True is for on-policy algorithms"):
        get_injected_agent(SAC)("MlpPolicy", multi_env("Pendulum-v1", 1), reproducible=True, seed=0)

    class Greedy(ActorCriticPolicy):
        def forward(self, obs: torch.Tensor, deterministic: bool = False) -> Any:
            return super().forward(obs, deterministic=True)

    with pytest.raises(ValueError, match=r"reproducible=True draws .* not those of Greedy"):
        get_injected_agent(PPO)(Greedy, multi_env("CartPole-v1", 1), reproducible=True, seed=0)
    from stable_baselines3.common.vec_env import VecNormalize

    model = get_injected_agent(PPO)("MlpPolicy", multi_env("CartPole-v1", 1), reproducible=True, seed=0)
    model.set_env(VecNormalize(multi_env("CartPole-v1", 1)))
    with pytest.raises(ValueError, match="reproducible=True does not support VecNormalize"):
        model.learn(64)
    assert model._collector is None  # refused before any work


class _StepCount(gym.Wrapper):
    """Counts the steps of every environment it wraps."""

    steps = 0

    def step(self, action: Any) -> Any:
        type(self).steps += 1
        return super().step(action)


@pytest.mark.parametrize("sleep", [0.0, 0.002], ids=["fast", "slow"])
def test_on_policy_thread_workers_with_fast_environments_wait_while_the_trainer_trains(
    sleep: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fast steps would only take the interpreter lock from ``train()``; slow ones (a sleep) give it back."""

    def sleepy_cartpole() -> gym.Env:
        env = _StepCount(gym.make("CartPole-v1"))
        if sleep:
            env.unwrapped.step = _sleeping(env.unwrapped.step, sleep)  # type: ignore[method-assign]
        return env

    steps_during_train: list[int] = []
    original_train = PPO.train

    def train(self: PPO) -> None:
        before = _StepCount.steps
        time.sleep(0.3)  # releases the lock: a worker that does not wait steps now
        original_train(self)
        steps_during_train.append(_StepCount.steps - before)

    monkeypatch.setattr(PPO, "train", train)
    model = get_injected_agent(PPO)("MlpPolicy", DummyVecEnv([sleepy_cartpole] * 2), n_steps=64, batch_size=64, seed=0)
    try:
        model.learn(640)
    finally:
        model.shutdown()
    assert len(steps_during_train) == 5
    # An advance under way as train() begins ends its 32 steps of each environment.
    most = STEPS_PER_ADVANCE * 2
    if sleep:
        assert all(steps > most for steps in steps_during_train[1:]), steps_during_train
    else:
        assert all(steps <= most for steps in steps_during_train[1:]), steps_during_train


def _sleeping(step: Any, seconds: float) -> Any:
    def sleeping_step(action: Any) -> Any:
        time.sleep(seconds)
        return step(action)

    return sleeping_step


class TorchThreadsRecorder(BaseCallback):
    """Keeps the trainer's torch thread count at every step."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: set[int] = set()

    def _on_step(self) -> bool:
        self.counts.add(torch.get_num_threads())
        return True


@pytest.mark.parametrize(
    ("algorithm", "env_id", "busy_workers"),
    [(PPO, "CartPole-v1", True), (SAC, "Pendulum-v1", False)],
    ids=["on-policy", "off-policy"],
)
def test_torch_keeps_to_the_cores_workers_leave_only_while_they_collect_ahead(
    algorithm: type, env_id: str, busy_workers: bool
) -> None:
    # On-policy, a worker collects the next rollout while the trainer trains; off-policy it acts one episode ahead
    # and waits for the trainer, whose torch keeps every core.
    cores = os.cpu_count() or 1
    before = torch.get_num_threads()
    torch.set_num_threads(cores)
    recorder = TorchThreadsRecorder()
    kwargs: dict[str, Any] = {"n_steps": 64, "batch_size": 64} if algorithm is PPO else {"learning_starts": 50}
    model = get_injected_agent(algorithm)(
        "MlpPolicy",
        DummyVecEnv([partial(gym.make, env_id)]),
        use_mp=False,
        seed=0,
        policy_kwargs={"net_arch": [64, 64]},  # not SMALL_NETWORK: off-policy algorithms write use_sde into it
        **kwargs,
    )
    try:
        model.learn(200, callback=recorder)
    finally:
        model.shutdown()
        threads_after = torch.get_num_threads()
        torch.set_num_threads(before)
    assert recorder.counts == {max(1, cores - 1) if busy_workers else cores}
    assert threads_after == cores
