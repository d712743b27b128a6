"""Reproducible on-policy collection: every rollout acted by exactly the weights one version behind the trainer.

Environment ``i``'s episodes are split into rollouts by its own steps: an episode belongs to rollout ``r`` until the
environment has ``n_steps`` steps in it, and rollout ``r`` is acted by weight version ``v0 + max(r - 1, 0)``, where
``v0`` is the version collection started with (the trainer trains on rollout ``r - 1`` while rollout ``r`` is
collected, as Cleanba does). A worker keeps the versions its environments need, acts for each environment alone
(batch composition never changes a result) and samples its actions from a generator seeded by the episode. What a
rollout holds, the weights that acted and every random draw depend on the seed only, never on timing, workers or
backend.

A worker's death changes nothing either. An episode is a function of its environment's index, its episode index
(they seed its reset and its actions) and its rollout (which names the weights), so what an environment needs to
go on is where it stands after its last delivered episode: the next episode's index (the pool knows which were
delivered), the rollout and the environment's steps in it. Each episode goes out with these as its task's resume
arguments; the pool resumes the task of a dead worker from them, on the replacement or another worker, which runs
the episodes not delivered, identical to those the dead worker would have run. The weights they need are never
lost: the trainer writes version ``v + 2`` over the publication of ``v`` only once it trained on the rollout ``v``
acts, so a version an unfinished rollout needs is the initial one (which every worker has), one of the board's two
publications (every worker is told of both) or one still to come.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy

from lit_sb3.collection.acting import sample_on_policy, samples_directly
from lit_sb3.collection.episode_worker import EnvironmentRun, EpisodeWorker
from lit_sb3.collection.episodes import EpisodePacket, Progress, collection_seed
from lit_sb3.collection.observations import as_tensor, stack
from lit_sb3.collection.weights import load_flat_weights, read_board
from lit_sb3.workers.arrays import ArrayHandle

#: Seconds a worker whose environments all wait for weights sleeps before it reads its messages again.
IDLE_SLEEP = 0.001


def required_version(rollout_index: int, initial_version: int) -> int:
    """
    :param rollout_index: Index of a rollout.
    :param initial_version: The weight version collection started with.
    :return: The weight version that acts in it.
    """
    return initial_version + max(rollout_index - 1, 0)


class LockstepEpisodeWorker(EpisodeWorker):
    """
    An :class:`~lit_sb3.collection.episode_worker.EpisodeWorker` for reproducible on-policy collection. Task
    ``collect(env_index, rollout=0, rollout_steps=0)`` starts environment ``env_index`` in that rollout with that
    many of its steps in it (a task resumed after its worker died). Each weight version is loaded when an
    environment first needs it, from the publications ``sync`` told of.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.spec.lockstep_steps is None or not isinstance(self.policy, ActorCriticPolicy):
            raise ValueError("lockstep collection needs an on-policy actor-critic policy and a rollout size")
        if not samples_directly(self.policy):
            raise ValueError(
                "lockstep collection draws categorical or diagonal Gaussian actions of ActorCriticPolicy.forward, "
                f"not those of {type(self.policy).__name__}"
            )
        self.rollout_steps = self.spec.lockstep_steps
        self._template = copy.deepcopy(self.policy)
        self.initial_version = self.version
        self._policies: dict[int, BasePolicy] = {self.version: self.policy}
        self._publications: dict[int, ArrayHandle] = {}

    def sync(
        self,
        version: int | None,
        weights_handle: ArrayHandle | None,
        progress: Progress,
        previous: tuple[int, ArrayHandle] | None = None,
    ) -> int:
        """
        :param version: Version of newly published weights, or None.
        :param weights_handle: Where they were published.
        :param progress: The trainer's progress.
        :param previous: The version published before and where (the board holds both), or None.
        :return: The newest version the worker was told of.
        """
        self.progress = progress
        if version is not None and weights_handle is not None:
            self._publications = dict([previous] if previous is not None else [])
            self._publications[version] = weights_handle
            self.version = max(self.version, version)
        return self.version

    def _policy_for(self, run: EnvironmentRun) -> BasePolicy:
        return self._policies[required_version(run.rollout, self.initial_version)]

    def _version_for(self, run: EnvironmentRun) -> int:
        return required_version(run.rollout, self.initial_version)

    def _loaded_policy(self, version: int) -> BasePolicy | None:
        """:return: The policy of weight version ``version``, loaded on first use (None until it is published);
        the versions no environment needs any more are let go."""
        if version in self._policies:
            return self._policies[version]
        if version != self.initial_version and version not in self._publications:
            return None
        policy = copy.deepcopy(self._template)  # the initial version's weights
        if version != self.initial_version:
            weights = read_board(self._arrays.get(self._publications[version]), version)
            if weights is None:  # see the module's docstring: a version is rewritten only once no rollout needs it
                raise RuntimeError(f"weight version {version} was overwritten before this worker read it")
            load_flat_weights(policy, weights)
        needed = {self._version_for(run) for run in self._running}
        self._policies = {kept: old for kept, old in self._policies.items() if kept in needed}
        self._policies[version] = policy
        return policy

    def _reset(self, run: EnvironmentRun) -> None:
        super()._reset(run)
        seed = collection_seed(self.spec.base_seed, run.env_index, run.episode_index, 2)
        run.generator = th.Generator().manual_seed(seed)

    def _complete(self, run: EnvironmentRun, packet: EpisodePacket) -> EpisodePacket:
        closes = run.rollout_steps >= self.rollout_steps
        packet = dataclasses.replace(packet, rollout_index=run.rollout, closes_rollout=closes)
        if closes:
            run.rollout, run.rollout_steps = run.rollout + 1, 0
        return packet

    def _resume_args(self, run: EnvironmentRun) -> tuple[Any, ...]:
        return run.env_index, run.rollout, run.rollout_steps

    def _restore(self, run: EnvironmentRun, resumed: tuple[Any, ...]) -> None:
        if resumed:
            run.rollout, run.rollout_steps = resumed

    def _step(self) -> bool:
        stepped = ended = False
        for run in list(self._running):
            policy = self._loaded_policy(self._version_for(run))
            if policy is None:
                continue  # its rollout waits for the weights one version behind the trainer
            stepped = True
            env_action, action, value, log_prob = self._act_alone(policy, run)
            (outcome,) = self._stepper.step([run.env], [env_action])
            run.rollout_steps += 1  # before it is recorded: a finished episode closes the rollout it fills
            ended |= self._record_step(run, outcome, action, value=value, log_prob=log_prob)
        if not stepped:
            time.sleep(IDLE_SLEEP)
        return ended or not stepped  # back to the worker loop: deliver the episode, or read the awaited weights

    def _act_alone(self, policy: BasePolicy, run: EnvironmentRun) -> tuple[np.ndarray, np.ndarray, float, float]:
        assert isinstance(policy, ActorCriticPolicy)
        with th.no_grad():
            observation = as_tensor(stack([run.observation]))
            action, value, log_prob = sample_on_policy(policy, observation, run.generator)
        actions = action.numpy()[0]
        env_action = actions
        if isinstance(self.action_space, spaces.Box):
            env_action = np.clip(actions, self.action_space.low, self.action_space.high)
        return env_action, actions, float(value.flatten()[0]), float(log_prob.flatten()[0])
