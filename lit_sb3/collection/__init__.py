"""Episode collection for any Stable-Baselines3 algorithm on the worker pool: episode workers, weight publication,
the assembler of rollouts, built from an algorithm by :class:`CollectionPlan` (used by the injected agents and the
engines)."""

from lit_sb3.collection.collector import AsyncCollector
from lit_sb3.collection.episodes import ActingSpec, EpisodePacket, Progress
from lit_sb3.collection.plan import UNSUPPORTED, CollectionPlan, check_supported
from lit_sb3.collection.replay import add_transitions, one_column_replay_buffer
from lit_sb3.collection.rollout import Rollout, RolloutSpec, final_info
from lit_sb3.collection.weights import acting_module, flat_weights
from lit_sb3.evaluation.policy_kernels import policy_copy

__all__ = [
    "UNSUPPORTED",
    "ActingSpec",
    "AsyncCollector",
    "CollectionPlan",
    "EpisodePacket",
    "Progress",
    "Rollout",
    "RolloutSpec",
    "acting_module",
    "add_transitions",
    "check_supported",
    "final_info",
    "flat_weights",
    "one_column_replay_buffer",
    "policy_copy",
]
