"""Merging observation statistics without counting any observation twice.

Our evaluators hand back, with each candidate's results, the statistics of the observations each of its episodes
saw: :func:`combine_obs_rms` adds those to the last synced statistics in candidate order, the same whatever worker
ran what (so results are bit-identical for any number of workers). For callers that only have each worker's full
statistics (sb3-contrib's ARS uses ``get_obs_rms()``): after a sync, every worker starts from the same statistics
S, and a worker's statistics later are S combined with what it saw since. Combining running statistics can be
undone exactly (counts, means and second moments), so each worker's new data is ``worker - S``, and
:func:`merge_obs_rms` gives ``S + sum_i (worker_i - S)``: every observation counted once. (Combining whole worker
statistics and subtracting a count, as sb3-contrib's ARS does, keeps S's mean and variance weighted ``n_workers``
times.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from stable_baselines3.common.running_mean_std import RunningMeanStd

#: Observation statistics: one ``RunningMeanStd``, or one per key of a Dict observation space.
ObsRms = RunningMeanStd | dict[str, RunningMeanStd]


def subtract_running_mean_std(total: RunningMeanStd, part: RunningMeanStd) -> RunningMeanStd:
    """
    Statistics of the data in ``total`` that is not in ``part``, where ``total`` was built by combining ``part``
    with more data: the exact inverse of ``RunningMeanStd.combine``.

    :param total: Statistics of all the data.
    :param part: Statistics of a subset that ``total`` includes.
    :return: Statistics of the rest (count 0, mean 0, variance 0 when there is none).
    """
    count = float(total.count) - float(part.count)
    rest = RunningMeanStd(shape=total.mean.shape)
    if count <= 0.0:
        rest.count, rest.mean, rest.var = 0.0, np.zeros_like(total.mean), np.zeros_like(total.var)
        return rest
    mean = (total.count * total.mean - part.count * part.mean) / count
    delta = mean - part.mean
    second_moment = (
        total.var * total.count - part.var * part.count - np.square(delta) * part.count * count / total.count
    )
    rest.count, rest.mean, rest.var = count, mean, np.maximum(second_moment, 0.0) / count
    return rest


def merge_obs_rms(base: ObsRms, worker_obs_rms: Sequence[ObsRms], synced_obs_rms: Sequence[ObsRms]) -> ObsRms:
    """
    Add to ``base`` what each worker saw since its statistics were last synced.

    :param base: Statistics to extend, usually the ones last synced to the workers.
    :param worker_obs_rms: Each worker's full statistics (``AsyncEval.get_obs_rms()``).
    :param synced_obs_rms: Each worker's statistics right after its last sync (or at its start).
    :return: New merged statistics (``base`` is not modified). Dict statistics are merged key by key.
    """
    if isinstance(base, dict):
        return {
            key: _merge_one(rms, [_entry(w, key) for w in worker_obs_rms], [_entry(s, key) for s in synced_obs_rms])
            for key, rms in base.items()
        }
    return _merge_one(base, [_entry(w, None) for w in worker_obs_rms], [_entry(s, None) for s in synced_obs_rms])


def _entry(obs_rms: ObsRms, key: str | None) -> RunningMeanStd:
    if isinstance(obs_rms, dict):
        if key is None:
            raise TypeError("cannot merge per-key (Dict space) statistics into a single RunningMeanStd")
        return obs_rms[key]
    if key is not None:
        raise TypeError(f"expected per-key (Dict space) statistics with key {key!r}, got a single RunningMeanStd")
    return obs_rms


def _merge_one(
    base: RunningMeanStd, worker_obs_rms: list[RunningMeanStd], synced_obs_rms: list[RunningMeanStd]
) -> RunningMeanStd:
    merged = base.copy()
    for worker, synced in zip(worker_obs_rms, synced_obs_rms, strict=True):
        new_data = subtract_running_mean_std(worker, synced)
        if new_data.count > 0.0:
            merged.combine(new_data)
    return merged


def combine_obs_rms(base: ObsRms, parts: Sequence[ObsRms]) -> ObsRms:
    """
    :param base: Statistics to extend (not modified).
    :param parts: Statistics of further observations, combined into ``base`` one after the other, in this order.
    :return: New statistics of all the data. Dict statistics are combined key by key.
    """
    merged = copy_obs_rms(base)
    for part in parts:
        for key, rms in merged.items() if isinstance(merged, dict) else [(None, merged)]:
            addition = _entry(part, key)
            if addition.count > 0.0:
                rms.combine(addition)
    return merged


def copy_obs_rms(obs_rms: ObsRms) -> ObsRms:
    """
    :param obs_rms: Statistics, or a dict of them.
    :return: A deep copy.
    """
    copy: Callable[[RunningMeanStd], RunningMeanStd] = RunningMeanStd.copy
    if isinstance(obs_rms, dict):
        return {key: copy(value) for key, value in obs_rms.items()}
    return copy(obs_rms)


def check_same_statistics(obs_rms: object, reference: ObsRms) -> None:
    """
    :param obs_rms: Statistics offered to replace ``reference``.
    :param reference: The statistics in use.
    :raises TypeError: if ``obs_rms`` is not of the same kind (one ``RunningMeanStd``, or a dict with the same keys).
    :raises ValueError: if a shape differs.
    """
    if isinstance(reference, dict):
        if not isinstance(obs_rms, dict) or set(obs_rms) != set(reference):
            raise TypeError(f"obs_rms must be a dict of RunningMeanStd with keys {sorted(reference)}, got {obs_rms!r}")
        for key, rms in reference.items():
            check_same_statistics(obs_rms[key], rms)
        return
    if not isinstance(obs_rms, RunningMeanStd):
        raise TypeError(f"obs_rms must be a RunningMeanStd, got {type(obs_rms)!r}")
    if obs_rms.mean.shape != reference.mean.shape or obs_rms.var.shape != reference.var.shape:
        raise ValueError(
            f"obs_rms has mean shape {obs_rms.mean.shape} and var shape {obs_rms.var.shape}; "
            f"the observations have shape {reference.mean.shape}"
        )
