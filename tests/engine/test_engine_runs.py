"""The engines train for real: timing summary, warm-up, evaluation through AsyncEval, checkpoints and resume."""

from __future__ import annotations

import csv
import json
import time
from functools import partial
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.vec_env import DummyVecEnv
from torch.nn.utils import parameters_to_vector

from engine.helpers import engine_threads, rl_zoo_ppo, small_ppo_engine, small_sac_engine, worker_processes
from lit_sb3.engine import AsyncRLEngine, DataBuffer, EngineConfig, EnvGroup, PolicyGroup, SyncRLEngine
from lit_sb3.engine.base import BaseEngine
from lit_sb3.vec_env.candidate_eval import InProcessEval

THREADS = ["rollout", "dataset", "train", "weight_sync", "evaluate"]


def weights(model: PPO | SAC) -> np.ndarray:
    return parameters_to_vector(model.policy.parameters()).detach().numpy().copy()


def test_the_timing_summary_is_returned_printed_and_logged(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    engine = small_ppo_engine(
        AsyncRLEngine, verbose=True, log_folder=tmp_path, log_formats=("csv",), eval_interval=500, eval_episodes=2
    )
    summary = engine.run()
    threads, train_steps = summary["threads"], summary["train_steps"]
    assert set(threads) == set(THREADS)
    for name, thread in threads.items():
        # A thread's busy and idle spans follow one another, inside the run.
        assert 0 < thread["busy_seconds"] + thread["idle_seconds"] <= summary["wall_seconds"] + 1e-9, name
    assert 1 <= train_steps == engine.train_steps <= 2000 // 64 + 1  # rollouts of at least 64 steps
    # One iteration per train step, per dataset and per rollout taken (one dataset and one rollout may be under way
    # when the budget is spent); weight publications tried at least once (a try is repeated while the workers still
    # read the last one); one evaluation an iteration.
    assert threads["train"]["iterations"] == train_steps
    assert train_steps <= threads["dataset"]["iterations"] <= train_steps + 1
    assert threads["dataset"]["iterations"] <= threads["rollout"]["iterations"] <= threads["dataset"]["iterations"] + 1
    assert threads["weight_sync"]["iterations"] >= 1
    assert threads["evaluate"]["iterations"] == len(engine.evaluations) >= 1
    assert engine.collected_steps >= summary["env_steps"] == engine.num_timesteps >= 2000  # trained on
    assert summary["env_steps_per_second"] == pytest.approx(summary["env_steps"] / summary["wall_seconds"])
    assert summary["train_steps_per_second"] == pytest.approx(summary["train_steps"] / summary["wall_seconds"])
    lag = summary["policy_lag"]
    assert 0 <= lag["mean"] <= lag["p99"] <= lag["max"] <= 4 + 1  # the config's bound, plus the wait in the buffer
    printed = capsys.readouterr().out
    assert "AsyncRLEngine" in printed and all(name in printed for name in THREADS) and "policy lag" in printed
    with open(tmp_path / "progress.csv") as file:
        rows = list(csv.DictReader(file))
    logged = [row for row in rows if row["timing/env_steps_per_second"]]
    assert len(logged) == 1
    assert float(logged[0]["timing/env_steps_per_second"]) == pytest.approx(summary["env_steps_per_second"])
    assert float(logged[0]["timing/policy_lag_max"]) == lag["max"]
    # Each evaluation logged once, at most (two done between dumps: the newer), the last one too (the final dump's).
    logged_evaluations = [float(row["eval/mean_reward"]) for row in rows if row["eval/mean_reward"]]
    done = iter(evaluation["mean_return"] for evaluation in engine.evaluations)
    assert all(logged in done for logged in logged_evaluations)  # in order, none repeated
    assert logged_evaluations[-1] == engine.evaluations[-1]["mean_return"]
    assert engine_threads() == []


@pytest.mark.parametrize("engine_class", [AsyncRLEngine, SyncRLEngine])
def test_an_engine_with_the_minimal_config_builds_and_runs(
    engine_class: type[BaseEngine], capsys: pytest.CaptureFixture
) -> None:
    """Only the budget and the seed: the defaults log to stdout, with no folder to write in."""
    group = EnvGroup([partial(gym.make, "CartPole-v1") for _ in range(2)], backend="threads", n_workers=1)
    model = PPO("MlpPolicy", group.env, seed=0, n_steps=32, batch_size=64, n_epochs=1)
    engine = engine_class(
        EngineConfig(total_env_steps=2000, seed=0), group, PolicyGroup(model), DataBuffer.for_algorithm(model)
    )
    summary = engine.run()
    assert engine.num_timesteps >= 2000
    assert 1 <= summary["train_steps"] == engine.train_steps <= 2000 // 64 + 1  # rollouts of at least 64 steps
    printed = capsys.readouterr().out
    assert "| time/" in printed and "collected_steps" in printed  # the logger's stdout output
    assert engine_class.__name__ in printed  # verbose by default: the timing summary
    assert engine_threads() == []


def remembering_weights(engine_class: type[BaseEngine]) -> type[BaseEngine]:
    """:return: An engine that keeps the policy's flat weights of every train step in ``weights_by_version``."""

    class Remembering(engine_class):  # type: ignore[valid-type, misc]
        weights_by_version: ClassVar[dict[int, np.ndarray]] = {}

        def _train_step(self) -> None:
            if not self.weights_by_version:
                self.weights_by_version[self.train_steps] = self.policy_group.latest.policy.copy()
            super()._train_step()
            self.weights_by_version[self.train_steps] = self.policy_group.latest.policy.copy()

    return Remembering


@pytest.mark.parametrize("engine_class", [AsyncRLEngine, SyncRLEngine])
def test_evaluation_runs_through_async_eval_at_the_interval(engine_class: type[BaseEngine]) -> None:
    remembering = remembering_weights(engine_class)
    engine = small_ppo_engine(remembering, total_env_steps=3000, eval_interval=1000, eval_episodes=3)
    engine.run()
    evaluations = engine.evaluations
    assert 1 <= len(evaluations) <= 3
    steps = [evaluation["env_steps"] for evaluation in evaluations]
    assert all(at >= (index + 1) * 1000 for index, at in enumerate(steps))  # once per interval of steps
    assert steps == sorted(set(steps))
    # None left due: one that came due while another ran, or at the end of the budget, was done (on newer weights).
    assert engine.collected_steps < (steps[-1] // 1000 + 1) * 1000
    # Each evaluation is that of the weights of the train step it names, episodes seeded from the config's seed:
    # the same episodes in this process give the same returns.
    policy = PPO("MlpPolicy", "CartPole-v1").policy  # the engine's architecture
    with InProcessEval(DummyVecEnv([partial(gym.make, "CartPole-v1")]), policy, n_eval_episodes=3) as again:
        again.seed(0)
        for evaluation in evaluations:
            weights_then = remembering.weights_by_version[evaluation["train_steps"]]  # type: ignore[attr-defined]
            again.send_jobs(weights_then[None], 1)
            ((_, (returns, _lengths)),) = again.get_results()
            assert evaluation["mean_return"] == pytest.approx(float(np.mean(returns)))
            assert evaluation["std_return"] == pytest.approx(float(np.std(returns)))


def test_warm_up_builds_the_data_flow_with_one_real_step() -> None:
    engine = small_ppo_engine(AsyncRLEngine)
    engine.warm_up()
    try:
        assert engine.train_steps == 1
        assert engine.num_timesteps == engine.collected_steps >= 64
    finally:
        engine.close()
    engine.run()  # and the run goes on from there
    assert engine.num_timesteps >= 2000


def test_weights_trained_before_the_weight_sync_thread_starts_still_reach_the_workers() -> None:
    published: list[int] = []

    class LateSync(AsyncRLEngine):
        def sync_weights(self) -> None:
            while self.train_steps < 1 and self.coordinator.is_running():  # a train step ends before this starts
                time.sleep(0.001)
            super().sync_weights()

        def _publish(self) -> bool:
            sent = super()._publish()
            if sent:
                published.append(self.synced_version)
            return sent

    engine = small_ppo_engine(LateSync, total_env_steps=500)
    summary = engine.run()  # the rollouts wait for the new weights: without them the run would never end
    assert summary["train_steps"] >= 2
    assert published and published[0] >= 1


def test_sac_trains_off_policy_at_the_replay_ratio() -> None:
    engine = small_sac_engine(AsyncRLEngine, total_env_steps=1000)
    summary = engine.run()
    assert engine.num_timesteps >= 1000
    owed = int((engine.num_timesteps - 200) * 0.1)  # learning_starts 200, replay ratio 0.1
    assert engine.gradient_steps == owed
    assert engine.policy_group.algorithm._n_updates == owed
    assert summary["policy_lag"]["max"] <= 4 + 1


def test_the_sync_engine_gives_the_same_weights_twice_for_a_seed_and_others_for_another() -> None:
    """One worker thread; rollouts in lockstep (acted by the weights one train step behind), resets seeded from the
    config seed episode by episode."""
    runs = []
    for seed in (0, 0, 1):
        engine = small_ppo_engine(SyncRLEngine, total_env_steps=1500, seed=seed)
        summary = engine.run()
        runs.append(weights(engine.policy_group.algorithm))  # type: ignore[arg-type]
        assert summary["policy_lag"]["max"] <= 1
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


@pytest.mark.parametrize("n_envs", [1, 4])
def test_dqn_explores_on_its_schedule_and_updates_its_target_network(n_envs: int) -> None:
    group = EnvGroup([partial(gym.make, "CartPole-v1")] * n_envs, backend="threads")
    model = DQN("MlpPolicy", group.env, seed=0, learning_starts=200, target_update_interval=100)
    target_before = parameters_to_vector(model.q_net_target.parameters()).detach().clone()
    config = EngineConfig(total_env_steps=2000, seed=0, verbose=False, log_formats=())
    engine = AsyncRLEngine(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model))
    engine.run()
    # _on_step once per step of the n_envs environments, as learn() does (the target network every 100 env steps).
    assert model._n_calls == model.num_timesteps // n_envs and model.num_timesteps >= 2000
    assert model.exploration_rate < model.exploration_initial_eps
    # train_freq 4 (steps of the n_envs environments), one gradient step each
    assert engine.gradient_steps == (model.num_timesteps - 200) // (4 * n_envs)
    assert model._n_updates == engine.gradient_steps  # a batch drawn after the last train step is given back
    assert not th.equal(parameters_to_vector(model.q_net_target.parameters()), target_before)


class CrashAt100(AsyncRLEngine):
    """Fails when it starts its 101st train step (a crash after the checkpoint of step 100)."""

    def _train_step(self) -> None:
        if self.train_steps == 100:
            raise RuntimeError("crashed on purpose")
        super()._train_step()


class Watching(AsyncRLEngine):
    """Records the best mean return of the last 20 episodes after each train step (the benchmark's threshold)."""

    best_mean_return = -np.inf

    def _train_step(self) -> None:
        super()._train_step()
        self.best_mean_return = max(self.best_mean_return, self.recent_mean_return(20))


def ppo_cartpole_engine(engine_class: type[BaseEngine], checkpoints: Path) -> AsyncRLEngine:
    group = EnvGroup([partial(gym.make, "CartPole-v1") for _ in range(8)], backend="processes", n_workers=2)
    model = rl_zoo_ppo(group.env)
    config = EngineConfig(
        total_env_steps=100_000,
        seed=0,
        checkpoint_interval=50,
        checkpoint_folder=checkpoints,
        verbose=False,
        log_formats=(),
    )
    engine = engine_class(config, group, PolicyGroup(model), DataBuffer.for_algorithm(model))
    assert isinstance(engine, AsyncRLEngine)
    return engine


@pytest.mark.timeout(900)  # a real training run: far longer on a loaded machine than on a quiet one
def test_ppo_resumed_from_a_checkpoint_continues_and_reaches_475_on_cartpole(tmp_path: Path) -> None:
    """rl-zoo's CartPole hyper-parameters; 100k env steps in all, crashed after train step 100 and resumed."""
    crashed = ppo_cartpole_engine(CrashAt100, tmp_path)
    with pytest.raises(RuntimeError, match="crashed on purpose"):
        crashed.run()
    checkpoint = tmp_path / "train_step_100"
    assert sorted(path.name for path in tmp_path.glob("train_step_*")) == ["train_step_100", "train_step_50"]
    counters = json.loads((checkpoint / "counters.json").read_text())

    resumed = ppo_cartpole_engine(Watching, tmp_path / "resumed")
    assert isinstance(resumed, Watching)
    resumed.load_checkpoint(checkpoint)
    crashed_model, model = crashed.policy_group.algorithm, resumed.policy_group.algorithm
    assert np.array_equal(weights(model), weights(crashed_model))  # type: ignore[arg-type]
    optimizer_state = model.policy.optimizer.state_dict()["state"]
    for index, state in crashed_model.policy.optimizer.state_dict()["state"].items():
        assert th.equal(optimizer_state[index]["exp_avg"], state["exp_avg"])
        assert optimizer_state[index]["step"] == state["step"]
    assert resumed.train_steps == 100 and model._n_updates == crashed_model._n_updates
    assert resumed.num_timesteps == crashed.num_timesteps == counters["num_timesteps"]
    assert resumed.collected_steps == counters["collected_steps"] <= crashed.collected_steps

    summary = resumed.run()
    assert summary["train_steps"] == resumed.train_steps - 100
    assert resumed.num_timesteps >= 100_000
    assert (tmp_path / "resumed" / f"train_step_{resumed.train_steps // 50 * 50}").is_dir()
    # The threshold as the benchmark counts it (a deterministic evaluation of the last weights also depends on
    # how the last few asynchronous updates happened to fall).
    assert resumed.best_mean_return >= 475
    assert worker_processes() == []
