"""How collection workers choose on-policy actions: Stable-Baselines3's sampling without its distribution objects,
and float32 numpy maths for the common MLP actor-critics.

For a few observations at a time, the cost of acting is torch's per-call overhead, not arithmetic: one CartPole step
of the 64x64 actor-critic took 375 us through ``policy(obs)``, 178 us through :func:`sample_on_policy` and about
40 us through :class:`NumpyActorCritic` here. The numpy path computes the same values and log-probabilities to
float32 rounding (a probe on random weights checks it for each policy); its actions are drawn from each episode's
own generator. Policies with generalised state-dependent exploration (gSDE) have their numpy path too
(:class:`NumpyStateDependentActorCritic`): each episode draws its exploration matrix from its own generator.
"""

from __future__ import annotations

import math

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import (
    CategoricalDistribution,
    DiagGaussianDistribution,
    StateDependentNoiseDistribution,
)
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import CombinedExtractor, FlattenExtractor, MlpExtractor
from stable_baselines3.common.type_aliases import PyTorchObs

from lit_sb3.collection.observations import Observations, as_tensor
from lit_sb3.evaluation.policy_kernels import (
    PROBE_OBSERVATION_STD,
    PROBE_OBSERVATIONS,
    DenseLayer,
    KernelProbe,
    LayerStack,
    dense_layers,
    module_sequence,
    parameter_offsets,
)

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def samples_directly(policy: ActorCriticPolicy) -> bool:
    """
    :param policy: An actor-critic policy.
    :return: Whether :func:`sample_on_policy` draws its actions from the network's outputs: the policy keeps
        ``ActorCriticPolicy.forward`` and has categorical or diagonal Gaussian actions.
    """
    return type(policy).forward is ActorCriticPolicy.forward and type(policy.action_dist) in (
        CategoricalDistribution,
        DiagGaussianDistribution,
    )


def sample_on_policy(
    policy: ActorCriticPolicy, observations: PyTorchObs, generator: th.Generator | None = None
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """
    What ``policy(observations)`` returns (actions, values, log-probabilities), with categorical and diagonal
    Gaussian actions drawn from the network's outputs directly: the ``torch.distributions`` objects cost more than
    the network itself for a few observations (CartPole's 64x64 policy, one observation: 375 us a step through the
    policy, 178 us this way). The log-probabilities are computed as those distributions compute them. Other
    policies (see :func:`samples_directly`) go through the policy.

    :param policy: The acting policy.
    :param observations: A batch of observations, as tensors (a dict of them for Dict observations).
    :param generator: Draws the actions (the global generator if None); only where :func:`samples_directly`.
    :return: Actions (shaped as the action space, batched), values and log-probabilities.
    """
    if not samples_directly(policy):
        if generator is not None:
            raise TypeError(f"actions of {type(policy).__name__} cannot be drawn from a given generator")
        return policy(observations)
    output, values = _distribution_parameters(policy, observations)
    if isinstance(policy.action_dist, CategoricalDistribution):
        log_probabilities = output - output.logsumexp(dim=-1, keepdim=True)
        actions = th.multinomial(log_probabilities.exp(), 1, generator=generator).squeeze(-1)
        return actions, values, log_probabilities.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    scale = th.ones_like(output) * policy.log_std.exp()
    actions = th.normal(output, scale, generator=generator)
    log_probs = -((actions - output) ** 2) / (2 * scale**2) - scale.log() - math.log(math.sqrt(2 * math.pi))
    return actions, values, log_probs.sum(dim=-1)


def sample_from_generators(
    policy: ActorCriticPolicy, observations: PyTorchObs, generators: list[np.random.Generator]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    :func:`sample_on_policy` for any policy where :func:`samples_directly` (CNN and Dict feature extractors too),
    with each observation's action drawn from its own numpy generator as :class:`NumpyActorCritic` draws it: the
    same seed gives the same actions whichever of the two computes the network, and the draws never touch torch's
    global generator (which the trainer's thread uses).

    :param policy: The acting policy.
    :param observations: A batch of observations, as tensors (a dict of them for Dict observations).
    :param generators: One generator per observation.
    :return: Actions (shaped as the action space, batched), values and log-probabilities.
    """
    output, values = _distribution_parameters(policy, observations)
    log_std = None if isinstance(policy.action_dist, CategoricalDistribution) else policy.log_std.detach().numpy()
    actions, log_probs = _draw(output.numpy(), log_std, generators, policy.action_space.shape or ())
    return actions, values.flatten().numpy(), log_probs


def _distribution_parameters(policy: ActorCriticPolicy, observations: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
    """:return: The action distribution's parameters (logits or means) and the values of ``observations``."""
    features = policy.extract_features(observations)
    if policy.share_features_extractor:
        latent_pi, latent_vf = policy.mlp_extractor(features)
    else:
        latent_pi = policy.mlp_extractor.forward_actor(features[0])
        latent_vf = policy.mlp_extractor.forward_critic(features[1])
    return policy.action_net(latent_pi), policy.value_net(latent_vf)


def _draw(
    output: np.ndarray, log_std: np.ndarray | None, generators: list[np.random.Generator], action_shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """
    :param output: Logits (categorical actions) or means (diagonal Gaussian ones), one row per observation.
    :param log_std: The Gaussian's log standard deviations; None for categorical actions.
    :param generators: One generator per row, which draws its action.
    :param action_shape: The action space's shape.
    :return: The actions and their log-probabilities.
    """
    if log_std is None:  # inverse CDF of the unnormalised weights: a draw below the last cumulative weight
        shifted = output - output.max(axis=1, keepdims=True)
        cumulative = np.exp(shifted).cumsum(axis=1)
        total = cumulative[:, -1]
        draws = np.fromiter([generator.random() for generator in generators], np.float32, len(generators)) * total
        actions = (cumulative < draws[:, None]).sum(axis=1)
        return actions, shifted[np.arange(len(actions)), actions] - np.log(total)
    noise = np.stack([generator.standard_normal(len(log_std), dtype=np.float32) for generator in generators])
    gaussian = output + np.exp(log_std) * noise
    log_probs = (-0.5 * noise**2 - log_std - np.float32(_LOG_SQRT_2PI)).sum(axis=1)
    return gaussian.reshape(len(gaussian), *action_shape), log_probs


class NumpyActorCritic:
    """
    Actions, values and log-probabilities of an ``ActorCriticPolicy`` with flat ``Box`` observations (or Dict
    observations of flat ``Box`` and ``MultiBinary`` keys, which ``CombinedExtractor`` concatenates), the default
    ``MlpExtractor`` (linear layers with ReLU or Tanh) and categorical or diagonal Gaussian actions, in float32
    numpy: the actor and the critic are two :class:`~lit_sb3.evaluation.policy_kernels.LayerStack` (the kernel of
    evaluation) whose weights every observation of a batch shares. Build it with :meth:`for_policy`, which says None
    for anything else.

    :param policy: The policy (its parameters' order is that of the flat weight vectors to :meth:`load`).
    :param offsets: Where its parameters start in that vector (:func:`parameter_offsets`).
    :param actor: The layers from the observation to the action distribution's parameters.
    :param critic: The layers from the observation to the value.
    :param keys: Dict observations: the keys ``CombinedExtractor`` flattens and concatenates, in its order; None for
        ``Box`` observations.
    """

    def __init__(
        self,
        policy: ActorCriticPolicy,
        offsets: dict[int, int],
        actor: list[DenseLayer],
        critic: list[DenseLayer],
        keys: tuple[str, ...] | None = None,
    ) -> None:
        self.keys = keys
        self.actor = LayerStack(actor, 1, shared_weights=True)
        self.critic = LayerStack(critic, 1, shared_weights=True)
        categorical = isinstance(policy.action_dist, CategoricalDistribution)
        #: Where the Gaussian's log standard deviations start in the flat weights; None for categorical actions.
        self.log_std_offset = None if categorical else offsets[id(policy.log_std)]
        self.action_shape = policy.action_space.shape or ()
        self._log_std = np.zeros(0, np.float32)

    @classmethod
    def for_policy(cls, policy: ActorCriticPolicy) -> NumpyActorCritic | None:
        """
        :param policy: An on-policy algorithm's policy.
        :return: Its numpy counterpart, loaded with its weights, or None if the policy is not of that shape or a
            :class:`~lit_sb3.evaluation.policy_kernels.KernelProbe` does not reproduce it.
        """
        keys = _flattened_keys(policy)
        flat_dict = keys is not None and type(policy.mlp_extractor) is MlpExtractor
        if not samples_directly(policy) or not (_simple_actor_critic(policy) or flat_dict):
            return None
        offsets = parameter_offsets(policy)
        extractor = policy.mlp_extractor
        actor = dense_layers([*module_sequence(extractor.policy_net), policy.action_net], offsets)
        critic = dense_layers([*module_sequence(extractor.value_net), policy.value_net], offsets)
        if not actor or not critic or actor[-1].activation is not None or critic[-1].activation is not None:
            return None
        acting = cls(policy, offsets, actor, critic, keys)
        if not acting._reproduces(policy):
            return None
        acting.load(th.nn.utils.parameters_to_vector(policy.parameters()).detach().double().numpy())
        return acting

    def load(self, weights: np.ndarray) -> None:
        """
        :param weights: The policy's flat parameter vector.
        """
        self.actor.load(weights)
        self.critic.load(weights)
        if self.log_std_offset is not None:
            size = math.prod(self.action_shape)
            self._log_std = weights[self.log_std_offset : self.log_std_offset + size].astype(np.float32)

    def act(
        self, observations: Observations, generators: list[np.random.Generator]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """
        :param observations: A batch of observations.
        :param generators: One random generator per observation, which draws its action.
        :return: Actions (shaped as the action space, batched), values and log-probabilities.
        """
        if isinstance(observations, dict):
            assert self.keys is not None
            count = len(generators)
            inputs = np.concatenate(
                [np.asarray(observations[key], dtype=np.float32).reshape(count, -1) for key in self.keys], axis=1
            )
        else:
            inputs = np.asarray(observations).reshape(len(observations), -1)
        values = self.critic.forward(inputs)[:, 0].copy()
        output = self.actor.forward(inputs)  # the stack's buffer: read before the next call
        log_std = None if self.log_std_offset is None else self._log_std
        actions, log_probs = _draw(output, log_std, generators, self.action_shape)
        return actions, values, log_probs

    def _reproduces(self, policy: ActorCriticPolicy) -> bool:
        """Whether this gives the torch policy's values and log-probabilities on a probe."""
        probe = KernelProbe.of(policy)
        self.load(probe.weights)
        observations = _probe_observations(policy, probe)
        generators = [np.random.default_rng(index) for index in range(PROBE_OBSERVATIONS)]
        actions, values, log_probs = self.act(observations, generators)
        assert isinstance(probe.policy, ActorCriticPolicy)
        with th.no_grad():
            expected_values, expected_log_probs, _ = probe.policy.evaluate_actions(
                as_tensor(observations), th.as_tensor(actions)
            )
        return probe.matches(values, expected_values.flatten()) and probe.matches(log_probs, expected_log_probs)


def _flattened_keys(policy: ActorCriticPolicy) -> tuple[str, ...] | None:
    """:return: For Dict observations that the policy's ``CombinedExtractor`` only flattens (no image, no one-hot
    encoding: ``Box`` and ``MultiBinary`` keys), the keys in the order it concatenates them; else None."""
    space = policy.observation_space
    if not isinstance(space, spaces.Dict):
        return None
    keys: tuple[str, ...] | None = None
    for extractor in (policy.pi_features_extractor, policy.vf_features_extractor):
        if type(extractor) is not CombinedExtractor or not all(
            type(module) is th.nn.Flatten for module in extractor.extractors.values()
        ):
            return None
        keys = tuple(extractor.extractors.keys())
    assert keys is not None
    for key in keys:
        subspace = space[key]
        if not isinstance(subspace, spaces.Box | spaces.MultiBinary) or (
            policy.normalize_images and is_image_space(subspace)
        ):
            return None
    return keys


def _probe_observations(policy: ActorCriticPolicy, probe: KernelProbe) -> Observations:
    """:return: The probe's observations, or random ones per key for Dict observations."""
    space = policy.observation_space
    if not isinstance(space, spaces.Dict):
        return probe.observations
    rng = np.random.default_rng(0)
    return {
        key: rng.normal(0.0, PROBE_OBSERVATION_STD, (PROBE_OBSERVATIONS, *(subspace.shape or ()))).astype(np.float32)
        for key, subspace in space.spaces.items()
    }


def _simple_actor_critic(policy: ActorCriticPolicy) -> bool:
    """Whether the policy is ``ActorCriticPolicy``'s own network on flat ``Box`` observations (no images)."""
    observation_space = policy.observation_space
    return (
        type(policy).forward is ActorCriticPolicy.forward
        and isinstance(observation_space, spaces.Box)
        and not (policy.normalize_images and is_image_space(observation_space))
        and type(policy.mlp_extractor) is MlpExtractor
        and type(policy.pi_features_extractor) is FlattenExtractor
        and type(policy.vf_features_extractor) is FlattenExtractor
    )


class NumpyStateDependentActorCritic:
    """
    Generalised state-dependent exploration (gSDE; Raffin, Kober and Stulp 2021, Stable-Baselines3's
    ``StateDependentNoiseDistribution``) of an ``ActorCriticPolicy`` in float32 numpy, for the same policies as
    :class:`NumpyActorCritic` without a squashing ``tanh``. With the actor's latent features ``z`` (the last hidden
    layer), the mean ``mu = W z + b`` and an exploration matrix ``E`` drawn per episode from ``N(0, sigma^2)``
    (``sigma = exp(log_std)``, or SB3's ``expln``; one column repeated without ``full_std``)::

        action   = mu + z E
        log_prob = sum_j log N(action_j; mu_j, sqrt((z^2 sigma^2)_j + epsilon))

    :param policy: The policy (its parameters' order is that of the flat weight vectors to :meth:`load`).
    :param offsets: Where its parameters start in that vector (:func:`parameter_offsets`).
    :param latent: The actor's hidden layers (none: the observation is the latent).
    :param mean: The layer from the latent to the mean action.
    :param critic: The layers from the observation to the value.
    """

    def __init__(
        self,
        policy: ActorCriticPolicy,
        offsets: dict[int, int],
        latent: list[DenseLayer],
        mean: list[DenseLayer],
        critic: list[DenseLayer],
    ) -> None:
        distribution = policy.action_dist
        assert isinstance(distribution, StateDependentNoiseDistribution)
        self.latent = LayerStack(latent, 1, shared_weights=True) if latent else None
        self.mean = LayerStack(mean, 1, shared_weights=True)
        self.critic = LayerStack(critic, 1, shared_weights=True)
        self.use_expln = distribution.use_expln
        self.epsilon = np.float32(distribution.epsilon)
        self.log_std_offset = offsets[id(policy.log_std)]
        self.log_std_shape = tuple(policy.log_std.shape)
        self.action_shape = policy.action_space.shape or ()
        self.action_size = math.prod(self.action_shape)
        self._std = np.zeros((self.log_std_shape[0], self.action_size), np.float32)

    @classmethod
    def for_policy(cls, policy: ActorCriticPolicy) -> NumpyStateDependentActorCritic | None:
        """
        :param policy: An on-policy algorithm's policy.
        :return: Its numpy counterpart, loaded with its weights, or None if it does not use gSDE, is not of that
            shape, squashes its actions, or a :class:`~lit_sb3.evaluation.policy_kernels.KernelProbe` does not
            reproduce it.
        """
        distribution = policy.action_dist
        if (
            not isinstance(distribution, StateDependentNoiseDistribution)
            or distribution.bijector is not None
            or not _simple_actor_critic(policy)
        ):
            return None
        offsets = parameter_offsets(policy)
        extractor = policy.mlp_extractor
        latent = dense_layers(module_sequence(extractor.policy_net), offsets)
        mean = dense_layers([policy.action_net], offsets)
        critic = dense_layers([*module_sequence(extractor.value_net), policy.value_net], offsets)
        if latent is None or mean is None or not critic or len(mean) != 1 or mean[0].activation is not None:
            return None
        if critic[-1].activation is not None:
            return None
        acting = cls(policy, offsets, latent, mean, critic)
        if not acting._reproduces(policy):
            return None
        acting.load(th.nn.utils.parameters_to_vector(policy.parameters()).detach().double().numpy())
        return acting

    def load(self, weights: np.ndarray) -> None:
        """:param weights: The policy's flat parameter vector."""
        if self.latent is not None:
            self.latent.load(weights)
        self.mean.load(weights)
        self.critic.load(weights)
        size = math.prod(self.log_std_shape)
        log_std = weights[self.log_std_offset : self.log_std_offset + size].astype(np.float32)
        log_std = log_std.reshape(self.log_std_shape)
        if self.use_expln:  # SB3's expln: exp below zero, log(1 + x) + 1 above, so the std grows slowly
            std = np.where(log_std <= 0, np.exp(np.minimum(log_std, 0)), np.log1p(np.maximum(log_std, 0)) + 1)
        else:
            std = np.exp(log_std)
        self._std = np.broadcast_to(std, (self.log_std_shape[0], self.action_size)).astype(np.float32)

    def exploration_matrix(self, generator: np.random.Generator) -> np.ndarray:
        """:return: An exploration matrix drawn from the current standard deviations with ``generator``."""
        return generator.standard_normal(self._std.shape, dtype=np.float32) * self._std

    def act(self, observations: np.ndarray, matrices: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """
        :param observations: A batch of observations.
        :param matrices: The exploration matrix of each observation's episode.
        :return: Actions (shaped as the action space, batched), values and log-probabilities.
        """
        inputs = np.asarray(observations, dtype=np.float32).reshape(len(observations), -1)
        values = self.critic.forward(inputs)[:, 0].copy()
        latent = inputs if self.latent is None else self.latent.forward(inputs).copy()
        mean = self.mean.forward(latent).copy()
        noise = np.einsum("bi,bij->bj", latent, np.stack(matrices))
        actions = mean + noise
        scale = np.sqrt((latent**2) @ (self._std**2) + self.epsilon)
        log_probs = (-0.5 * (noise / scale) ** 2 - np.log(scale) - np.float32(_LOG_SQRT_2PI)).sum(axis=1)
        return actions.reshape(len(actions), *self.action_shape), values, log_probs

    def _reproduces(self, policy: ActorCriticPolicy) -> bool:
        """Whether this gives the torch policy's values and log-probabilities on a probe."""
        probe = KernelProbe.of(policy)
        self.load(probe.weights)
        generator = np.random.default_rng(0)
        matrices = [self.exploration_matrix(generator) for _ in probe.observations]
        actions, values, log_probs = self.act(probe.observations, matrices)
        assert isinstance(probe.policy, ActorCriticPolicy)
        with th.no_grad():
            expected_values, expected_log_probs, _ = probe.policy.evaluate_actions(
                th.as_tensor(probe.observations), th.as_tensor(actions)
            )
        return probe.matches(values, expected_values.flatten()) and probe.matches(log_probs, expected_log_probs)
