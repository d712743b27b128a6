"""How collection workers choose off-policy actions in float32 numpy, for the MLP actors of SAC (and TQC), TD3 (and
DDPG) and DQN on flat ``Box`` observations.

Acting is what a thread worker does while the trainer trains, and both need the interpreter: one Pendulum step of
SAC's 256x256 actor took 1.6 ms through ``policy.predict`` (its checks, its distribution objects, a dozen torch
calls that each hand the interpreter lock over) and 0.13 ms here (best of 5, this 2-core machine under load), so
the trainer waits that much less for the lock. SAC's Gaussian noise is drawn from each episode's own generator,
never from torch's global generator, which the trainer's thread draws its batches' noise from. A probe on random
weights checks that the numpy actor gives the torch actor's outputs; any other policy keeps ``policy.predict``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import SquashedDiagGaussianDistribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import FlattenExtractor
from stable_baselines3.sac.policies import LOG_STD_MAX, LOG_STD_MIN

from lit_sb3.collection.weights import acting_module, flat_weights
from lit_sb3.evaluation.policy_kernels import (
    KernelProbe,
    LayerStack,
    dense_layers,
    module_sequence,
    parameter_offsets,
)


class NumpyOffPolicyActor:
    """
    ``policy.predict(observations, deterministic=False)`` of an off-policy policy, in float32 numpy, from the flat
    weights of its acting module (:func:`~lit_sb3.collection.weights.acting_module`: the actor, or DQN's
    Q-network). Build it with :meth:`for_policy`, which says None for policies of another shape.

    - ``"squashed_gaussian"`` (SAC's actor without gSDE): ``tanh(mu(z) + exp(clip(log_std(z))) * noise)`` with
      ``z`` the latent features and the noise drawn from each observation's generator, then unscaled to the action
      space's bounds.
    - ``"tanh"`` (TD3's actor, whose last layer is a ``Tanh``): the network's output, unscaled.
    - ``"argmax"`` (DQN's Q-network): the action of the largest Q-value.

    :param policy: The policy.
    :param kind: One of the three above.
    :param trunk: The layers from the observation to the latent features (SAC), the action (TD3) or the Q-values.
    :param heads: SAC: the mean and log-standard-deviation layers on the latent features; else none.
    """

    def __init__(
        self, policy: BasePolicy, kind: str, trunk: LayerStack | None, heads: tuple[LayerStack, LayerStack] | None
    ) -> None:
        self.kind = kind
        self.trunk = trunk
        self.heads = heads
        self.action_space = policy.action_space
        self.low = np.asarray(getattr(policy.action_space, "low", 0.0), np.float32)
        self.high = np.asarray(getattr(policy.action_space, "high", 0.0), np.float32)
        self.action_shape = policy.action_space.shape or ()

    @classmethod
    def for_policy(cls, policy: BasePolicy) -> NumpyOffPolicyActor | None:
        """
        :param policy: An off-policy algorithm's policy.
        :return: Its numpy actor, loaded with its weights, or None if the policy is not of a shape above or a
            :class:`~lit_sb3.evaluation.policy_kernels.KernelProbe` does not reproduce it.
        """
        if not isinstance(policy.observation_space, spaces.Box) or (
            getattr(policy, "normalize_images", False) and is_image_space(policy.observation_space)
        ):
            return None
        module = acting_module(policy)
        offsets = parameter_offsets(module)
        if type(getattr(module, "features_extractor", None)) is not FlattenExtractor:
            return None
        actor = cls._recognise(policy, module, offsets)
        if actor is None or not actor._reproduces(policy):
            return None
        actor.load(flat_weights(module))
        return actor

    @classmethod
    def _recognise(cls, policy: BasePolicy, module: Any, offsets: dict[int, int]) -> NumpyOffPolicyActor | None:
        """:return: The numpy actor of ``module``'s layers (an actor or a Q-network), unloaded, or None if they are
        not of a known shape."""
        box = isinstance(policy.action_space, spaces.Box)
        if box and isinstance(getattr(module, "action_dist", None), SquashedDiagGaussianDistribution):
            if getattr(module, "use_sde", True) or not isinstance(getattr(module, "latent_pi", None), th.nn.Module):
                return None
            trunk = dense_layers(module_sequence(module.latent_pi), offsets)
            mean = dense_layers([module.mu], offsets)
            log_std = dense_layers([module.log_std], offsets)
            if trunk is None or mean is None or log_std is None or len(mean) != 1 or len(log_std) != 1:
                return None
            stack = LayerStack(trunk, 1, shared_weights=True) if trunk else None
            heads = (LayerStack(mean, 1, shared_weights=True), LayerStack(log_std, 1, shared_weights=True))
            return cls(policy, "squashed_gaussian", stack, heads)
        network = getattr(module, "mu", None) if box else getattr(module, "q_net", None)
        if not isinstance(network, th.nn.Sequential):
            return None
        layers = dense_layers(module_sequence(network), offsets)
        if not layers or layers[-1].activation != ("tanh" if box else None):
            return None
        return cls(policy, "tanh" if box else "argmax", LayerStack(layers, 1, shared_weights=True), None)

    def load(self, weights: np.ndarray) -> None:
        """:param weights: The acting module's flat parameters (:func:`~lit_sb3.collection.weights.flat_weights`)."""
        for stack in [self.trunk, *(self.heads or ())]:
            if stack is not None:
                stack.load(weights)

    def predict(self, observations: np.ndarray, generators: list[np.random.Generator]) -> np.ndarray:
        """
        :param observations: A batch of observations.
        :param generators: One generator per observation (SAC draws its noise from them).
        :return: The actions, as ``policy.predict`` gives them (unscaled to the action space's bounds).
        """
        inputs = np.asarray(observations, dtype=np.float32).reshape(len(observations), -1)
        output = inputs if self.trunk is None else self.trunk.forward(inputs)
        if self.kind == "argmax":
            return output.argmax(axis=1).reshape(len(inputs), *self.action_shape)
        if self.heads is not None:
            latent = output.copy()  # the trunk's buffer
            mean, log_std = self.heads[0].forward(latent).copy(), self.heads[1].forward(latent)
            std = np.exp(np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))
            noise = np.stack([generator.standard_normal(mean.shape[1], dtype=np.float32) for generator in generators])
            output = np.tanh(mean + std * noise)
        return self._unscale(output).reshape(len(inputs), *self.action_shape)

    def _unscale(self, squashed: np.ndarray) -> np.ndarray:
        """``BasePolicy.unscale_action``: from [-1, 1] to the action space's bounds."""
        return self.low + 0.5 * (squashed + 1.0) * (self.high - self.low)

    def _reproduces(self, policy: BasePolicy) -> bool:
        """Whether this gives the torch actor's outputs on a probe (SAC: its mean and clipped log-std, and its
        deterministic action)."""
        probe = KernelProbe.of(policy)
        module: Any = acting_module(probe.policy)
        self.load(flat_weights(module).astype(np.float32))
        observations = th.as_tensor(probe.observations)
        with th.no_grad():
            if self.kind == "argmax":
                expected = module(observations).argmax(dim=1)
                return probe.matches(self.predict(probe.observations, []), expected, exact=True)
            deterministic, _ = probe.policy.predict(probe.observations, deterministic=True)
            if self.heads is None:
                return probe.matches(self.predict(probe.observations, []), deterministic)
            expected_mean, expected_log_std, _ = module.get_action_dist_params(observations)
        assert self.heads is not None
        inputs = probe.observations.reshape(len(probe.observations), -1)
        latent = inputs if self.trunk is None else self.trunk.forward(inputs).copy()
        mean = self.heads[0].forward(latent).copy()
        log_std = np.clip(self.heads[1].forward(latent), LOG_STD_MIN, LOG_STD_MAX)
        return (
            probe.matches(mean, expected_mean)
            and probe.matches(log_std, expected_log_std)
            and probe.matches(self._unscale(np.tanh(mean)), deterministic)
        )
