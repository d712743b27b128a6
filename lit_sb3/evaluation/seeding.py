"""Seeds of evaluation episodes, derived from what identifies the episode and nothing else."""

from __future__ import annotations

import numpy as np


def episode_seed(base_seed: int, round_index: int, candidate_index: int, episode_index: int) -> int:
    """
    Seed for resetting one evaluation episode: independent of the worker, slot or batch that runs it.

    :param base_seed: The experiment's seed.
    :param round_index: Index of the round (generation) since seeding.
    :param candidate_index: Index of the candidate in the population.
    :param episode_index: Index of the episode among the candidate's evaluation episodes.
    :return: A 32-bit seed.
    """
    sequence = np.random.SeedSequence(base_seed, spawn_key=(round_index, candidate_index, episode_index))
    return int(sequence.generate_state(1)[0])
