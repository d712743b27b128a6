"""Logger keys, as sb3-contrib's ARS plus each algorithm's own, through the stdout, csv and TensorBoard outputs."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from stable_baselines3.common.logger import configure
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lit_sb3.population import ARS, CEM, CMAES, ES, PGPE, SNES, XNES
from population.helpers import ALGORITHMS, EpisodeRecorder, RoundEnds, make_model

COMMON_KEYS = {
    "rollout/ep_rew_mean",
    "rollout/ep_len_mean",
    "rollout/return_std",
    "time/fps",
    "time/time_elapsed",
    "time/total_timesteps",
    "train/iterations",
}
OWN_KEYS = {
    ARS: {"train/learning_rate", "train/step_size", "train/delta_std"},
    ES: {"train/learning_rate", "train/sigma", "train/gradient_norm"},
    CEM: {"train/elite_return", "train/std", "train/extra_noise"},
    CMAES: {"train/sigma", "train/pop_size", "train/restarts", "train/stopped", "train/best_return"},
    PGPE: {"train/learning_rate", "train/stdev", "train/gradient_norm", "train/pop_size", "train/speed"},
    SNES: {"train/learning_rate", "train/stdev_learning_rate", "train/stdev", "train/pop_size"},
    XNES: {"train/learning_rate", "train/stdev_learning_rate", "train/stdev", "train/pop_size"},
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_csv_log_has_the_keys_once_per_round(algorithm, tmp_path):
    model = make_model(algorithm)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(500)
    with open(tmp_path / "progress.csv") as progress:
        rows = list(csv.DictReader(progress))
    assert COMMON_KEYS | OWN_KEYS[algorithm] <= set(rows[0])
    assert len(rows) == model._n_updates
    assert int(rows[-1]["time/total_timesteps"]) == model.num_timesteps
    assert [int(row["train/iterations"]) for row in rows] == list(range(1, model._n_updates + 1))


def test_stdout_log_with_verbose_and_log_interval(capsys):
    model = make_model(ARS, verbose=1)
    model.learn(1000, log_interval=2)
    printed = capsys.readouterr().out
    assert "ep_rew_mean" in printed and "step_size" in printed
    assert printed.count("total_timesteps") == model._n_updates // 2


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_tensorboard_log_has_the_keys_at_the_timesteps_of_the_rounds(algorithm, tmp_path):
    model = make_model(algorithm, tensorboard_log=str(tmp_path))
    rounds = RoundEnds()
    model.learn(500, callback=rounds, tb_log_name="run")
    (run_folder,) = tmp_path.iterdir()
    assert run_folder.name == "run_1"
    events = EventAccumulator(str(run_folder))
    events.Reload()
    expected = {"rollout/ep_rew_mean", "rollout/return_std", "time/fps"} | OWN_KEYS[algorithm]
    assert expected <= set(events.Tags()["scalars"])
    assert [event.step for event in events.Scalars("rollout/ep_rew_mean")] == rounds.timesteps


def test_ep_rew_mean_averages_the_last_stats_window_size_episodes_as_in_stable_baselines3(tmp_path):
    model = make_model(ARS, stats_window_size=5)  # rounds of 8 episodes
    recorder = EpisodeRecorder()
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(500, callback=recorder)
    with open(tmp_path / "progress.csv") as progress:
        last_row = list(csv.DictReader(progress))[-1]
    last_episodes = [step["infos"][0]["episode"] for step in recorder.steps[-5:]]
    assert float(last_row["rollout/ep_rew_mean"]) == pytest.approx(np.mean([episode["r"] for episode in last_episodes]))
    assert float(last_row["rollout/ep_len_mean"]) == pytest.approx(np.mean([episode["l"] for episode in last_episodes]))
