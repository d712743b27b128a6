"""Batched action computation: one candidate's weights per slot, all slots' actions in one call.

Known Stable-Baselines3 policy shapes (``ActorCriticPolicy``, TD3 and SAC actors with MLP extractors, and any policy
that is ``action_net(features_extractor(obs))`` such as the ARS linear/MLP policies, on flat Box observations and
Box or Discrete actions) run as float32 numpy maths on weights sliced once per candidate from the flat parameter
vector, once a probe on random weights has shown that they give ``predict``'s actions. Anything else runs through
copies of the torch policy.

The numpy path is batch-invariant: a slot's actions depend only on its own weights and observation, whatever the
other slots hold, because each slot's matrix product is a separate BLAS call of the same shape.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import CategoricalDistribution, DiagGaussianDistribution
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import FlattenExtractor
from stable_baselines3.sac.policies import Actor as SACActor
from stable_baselines3.sac.policies import SACPolicy
from stable_baselines3.td3.policies import Actor as TD3Actor
from stable_baselines3.td3.policies import TD3Policy
from torch import nn

_ACTIVATIONS = {nn.ReLU: "relu", nn.Tanh: "tanh"}


@dataclass(frozen=True)
class DenseLayer:
    """
    A linear layer inside the flat parameter vector, followed by an optional activation.

    :param weight_offset: Offset of the ``(out_features, in_features)`` weight in the flat vector.
    :param out_features: Output size.
    :param in_features: Input size.
    :param bias_offset: Offset of the bias, if any.
    :param activation: ``"relu"``, ``"tanh"`` or None.
    """

    weight_offset: int
    out_features: int
    in_features: int
    bias_offset: int | None
    activation: str | None


@dataclass(frozen=True)
class MlpLayout:
    """
    The part of a policy that maps a flat observation to a deterministic action.

    :param layers: Dense layers, in order.
    :param output: How the last layer's output becomes an action: ``"argmax"``, ``"clip"`` (to the action bounds),
        ``"unscale"`` (from [-1, 1] to the bounds) or ``"tanh_unscale"`` (tanh, then unscale).
    :param action_space: The policy's action space.
    """

    layers: tuple[DenseLayer, ...]
    output: str
    action_space: spaces.Space


class BatchedPolicy(ABC):
    """
    Computes the actions of ``n_slots`` candidates at once, one observation per slot.

    :param n_slots: Number of slots.
    """

    def __init__(self, n_slots: int) -> None:
        self.n_slots = n_slots

    @abstractmethod
    def load(self, slot: int, weights: np.ndarray) -> None:
        """
        Give ``slot`` a candidate's flat weight vector.

        :param slot: The slot.
        :param weights: Flat parameter vector, as ``parameters_to_vector(policy.parameters())``.
        """

    @abstractmethod
    def act(self, observations: Any, slots: list[int]) -> np.ndarray:
        """
        :param observations: One observation per slot (array with a leading slot axis, or a list).
        :param slots: The slots whose actions are needed; others may hold anything.
        :return: Deterministic actions, one per slot, as ``policy.predict(obs, deterministic=True)`` gives them.
        """


class NumpyMlpPolicy(BatchedPolicy):
    """
    Float32 numpy evaluation of an :class:`MlpLayout`, into buffers allocated once.

    Each layer is one batched matrix-vector product: a bias is folded into its weight matrix as an extra column
    that meets a constant 1 appended to the layer's input, and activations write straight into the next layer's
    input. A step of a two-hidden-layer MLP is about ten numpy calls, whatever the number of slots.

    :param layout: The policy's layout.
    :param n_slots: Number of slots.
    """

    def __init__(self, layout: MlpLayout, n_slots: int) -> None:
        super().__init__(n_slots)
        self.layout = layout
        layers = layout.layers
        with_bias = [layer.bias_offset is not None for layer in layers]
        self._inputs = [
            np.ones((n_slots, layer.in_features + bias), np.float32)
            for layer, bias in zip(layers, with_bias, strict=True)
        ]
        self._weights = [
            np.zeros((n_slots, layer.out_features, layer.in_features + bias), np.float32)
            for layer, bias in zip(layers, with_bias, strict=True)
        ]
        self._outputs = [np.zeros((n_slots, layer.out_features), np.float32) for layer in layers]
        self._observation_view = self._inputs[0][:, : layers[0].in_features]
        # Per layer: weights, input and output as (n_slots, features, 1) columns, so that each slot's product is a
        # matrix-vector product of its own, the output, its activation and where the activation writes.
        next_inputs = [inputs[:, : layer.out_features] for inputs, layer in zip(self._inputs[1:], layers, strict=False)]
        self._plan = [
            (weight, inputs[:, :, None], output[:, :, None], output, layer.activation, destination)
            for weight, inputs, output, layer, destination in zip(
                self._weights, self._inputs, self._outputs, layers, [*next_inputs, None], strict=True
            )
        ]
        space = layout.action_space
        if isinstance(space, spaces.Box):
            low = space.low.reshape(-1).astype(np.float32)
            high = space.high.reshape(-1).astype(np.float32)
            self._low, self._high = low, high
            self._half_range = np.float32(0.5) * (high - low)
            self._middle = low + self._half_range
            self._action_shape: tuple[int, ...] = (n_slots, *space.shape)

    def load(self, slot: int, weights: np.ndarray) -> None:
        for layer, weight in zip(self.layout.layers, self._weights, strict=True):
            size = layer.out_features * layer.in_features
            matrix = weights[layer.weight_offset : layer.weight_offset + size]
            weight[slot, :, : layer.in_features] = matrix.reshape(layer.out_features, layer.in_features)
            if layer.bias_offset is not None:
                weight[slot, :, layer.in_features] = weights[layer.bias_offset : layer.bias_offset + layer.out_features]

    def act(self, observations: Any, slots: list[int]) -> np.ndarray:
        view = self._observation_view
        np.copyto(view, observations.reshape(view.shape), casting="same_kind")
        for weight, column_input, column_output, output, activation, destination in self._plan:
            np.matmul(weight, column_input, out=column_output)
            target = output if destination is None else destination
            if activation == "relu":
                np.maximum(output, 0.0, out=target)
            elif activation == "tanh":
                np.tanh(output, out=target)
            elif destination is not None:
                np.copyto(destination, output)
        last = self._outputs[-1]
        if self.layout.output == "argmax":
            return np.argmax(last, axis=1)
        if self.layout.output == "clip":
            np.maximum(last, self._low, out=last)
            return np.minimum(last, self._high).reshape(self._action_shape)
        if self.layout.output == "tanh_unscale":
            np.tanh(last, out=last)
        # low + 0.5 * (a + 1) * (high - low), as middle + a * half_range
        np.multiply(last, self._half_range, out=last)
        return np.add(last, self._middle).reshape(self._action_shape)


class TorchPolicyCopies(BatchedPolicy):
    """
    One copy of the torch policy per slot, each queried with ``predict``: slow, but right for any policy.

    :param policy: The policy to copy.
    :param n_slots: Number of slots.
    """

    def __init__(self, policy: BasePolicy, n_slots: int) -> None:
        super().__init__(n_slots)
        self._copies = [copy.deepcopy(policy) for _ in range(n_slots)]
        for policy_copy in self._copies:
            policy_copy.set_training_mode(False)
        space = policy.action_space
        self._actions = np.zeros((n_slots, *(space.shape or ())), dtype=space.dtype)

    def load(self, slot: int, weights: np.ndarray) -> None:
        self._copies[slot].load_from_vector(weights)

    def act(self, observations: Any, slots: list[int]) -> np.ndarray:
        with th.no_grad():
            for slot in slots:
                action, _ = self._copies[slot].predict(observations[slot], deterministic=True)
                self._actions[slot] = action
        return self._actions


def make_batched_policy(policy: BasePolicy, n_slots: int) -> BatchedPolicy:
    """
    The fastest exact way to run ``policy`` on ``n_slots`` candidates at once.

    :param policy: The policy whose flat weight vectors will be loaded.
    :param n_slots: Number of slots.
    :return: A numpy kernel for known MLP shapes, else torch copies of the policy.
    """
    layout = mlp_layout(policy)
    if layout is None:
        return TorchPolicyCopies(policy, n_slots)
    return NumpyMlpPolicy(layout, n_slots)


def mlp_layout(policy: BasePolicy) -> MlpLayout | None:
    """
    Recognise the policies the numpy kernel handles.

    :param policy: A Stable-Baselines3 policy.
    :return: Its layout, or None if it is not a known MLP shape.
    """
    observation_space, action_space = policy.observation_space, policy.action_space
    if not isinstance(observation_space, spaces.Box) or not isinstance(action_space, spaces.Box | spaces.Discrete):
        return None
    if getattr(policy, "normalize_images", False) and is_image_space(observation_space):
        return None  # torch's preprocessing scales images by 1/255
    offsets = parameter_offsets(policy)
    is_box = isinstance(action_space, spaces.Box)
    modules: list[nn.Module] = []
    output: str
    if type(policy) is ActorCriticPolicy:
        if isinstance(policy.action_dist, DiagGaussianDistribution) and is_box and not policy.squash_output:
            output = "clip"
        elif isinstance(policy.action_dist, CategoricalDistribution):
            output = "argmax"
        else:
            return None
        modules = [policy.pi_features_extractor, *module_sequence(policy.mlp_extractor.policy_net), policy.action_net]
    elif type(policy) is TD3Policy and type(policy.actor) is TD3Actor:
        modules = [policy.actor.features_extractor, *module_sequence(policy.actor.mu)]
        output = "unscale"
    elif type(policy) is SACPolicy and type(policy.actor) is SACActor and not policy.actor.use_sde:
        modules = [policy.actor.features_extractor, *module_sequence(policy.actor.latent_pi), policy.actor.mu]
        output = "tanh_unscale"
    elif (direct := _direct_action_modules(policy)) is not None:
        modules = direct
        output = "argmax" if not is_box else ("unscale" if policy.squash_output else "clip")
    else:
        return None
    if not isinstance(modules[0], FlattenExtractor):
        return None
    layers = dense_layers(modules[1:], offsets)
    if not layers or layers[0].in_features != int(np.prod(observation_space.shape)):
        return None
    layout = MlpLayout(tuple(layers), output, action_space)
    return layout if _reproduces_predict(policy, layout) else None


def _direct_action_modules(policy: BasePolicy) -> list[nn.Module] | None:
    """
    The layout of the ARS policies (lit_sb3's and sb3-contrib's alike): ``action_net(features_extractor(obs))``,
    recognised by its modules, whatever package defines the class.

    :return: The features extractor then the layers of ``action_net``, if those two hold every parameter.
    """
    features_extractor = getattr(policy, "features_extractor", None)
    action_net = getattr(policy, "action_net", None)
    if not isinstance(features_extractor, nn.Module) or not isinstance(action_net, nn.Module):
        return None
    owned = {id(parameter) for module in (features_extractor, action_net) for parameter in module.parameters()}
    if owned != {id(parameter) for parameter in policy.parameters()}:
        return None  # more networks than the action path (e.g. a critic): not this layout
    return [features_extractor, *module_sequence(action_net)]


#: Random probes of a recognised layout against ``policy.predict``: how many observations, and the tolerance.
PROBE_OBSERVATIONS = 4
PROBE_TOLERANCE = 1e-4


def _reproduces_predict(policy: BasePolicy, layout: MlpLayout) -> bool:
    """
    Whether the numpy kernel gives ``policy.predict``'s actions on random weights and observations: recognising a
    layout by its modules says nothing of what ``forward`` does with them, so a policy that does more (or something
    else) takes the torch path.
    """
    rng = np.random.default_rng(0)
    probe = copy.deepcopy(policy).to("cpu")
    probe.set_training_mode(False)
    n_params = sum(parameter.numel() for parameter in probe.parameters())
    weights = rng.normal(0.0, 0.5, n_params).astype(np.float32)
    shape = (PROBE_OBSERVATIONS, *(policy.observation_space.shape or ()))
    observations = rng.normal(0.0, 3.0, shape).astype(np.float32)
    kernel = NumpyMlpPolicy(layout, PROBE_OBSERVATIONS)
    for slot in range(PROBE_OBSERVATIONS):
        kernel.load(slot, weights)
    actions = kernel.act(observations, list(range(PROBE_OBSERVATIONS)))
    probe.load_from_vector(weights)
    with th.no_grad():
        expected, _ = probe.predict(observations, deterministic=True)
    if isinstance(layout.action_space, spaces.Discrete):
        return bool(np.array_equal(actions, expected))
    return bool(np.allclose(actions, expected, rtol=PROBE_TOLERANCE, atol=PROBE_TOLERANCE))


def module_sequence(module: nn.Module) -> list[nn.Module]:
    """:return: The children of a ``Sequential``, or the module alone."""
    return list(module.children()) if isinstance(module, nn.Sequential) else [module]


def parameter_offsets(policy: nn.Module) -> dict[int, int]:
    """:return: Where each parameter (by ``id``) starts in the module's flat parameter vector."""
    offsets: dict[int, int] = {}
    position = 0
    for parameter in policy.parameters():
        offsets[id(parameter)] = position
        position += parameter.numel()
    return offsets


def dense_layers(modules: list[nn.Module], offsets: dict[int, int]) -> list[DenseLayer] | None:
    """
    :param modules: Linear layers, each optionally followed by a ReLU or Tanh (identities are skipped).
    :param offsets: The parameters' offsets (:func:`parameter_offsets`).
    :return: The dense layers, or None if a module is something else.
    """
    layers: list[DenseLayer] = []
    for module in modules:
        if isinstance(module, nn.Linear):
            bias = None if module.bias is None else offsets[id(module.bias)]
            layers.append(DenseLayer(offsets[id(module.weight)], module.out_features, module.in_features, bias, None))
        elif type(module) in _ACTIVATIONS and layers and layers[-1].activation is None:
            layers[-1] = DenseLayer(
                layers[-1].weight_offset,
                layers[-1].out_features,
                layers[-1].in_features,
                layers[-1].bias_offset,
                _ACTIVATIONS[type(module)],
            )
        elif not isinstance(module, nn.Identity):
            return None
    return layers
