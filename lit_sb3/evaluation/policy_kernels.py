"""Batched action computation: one candidate's weights per slot, all slots' actions in one call.

Known Stable-Baselines3 policy shapes (``ActorCriticPolicy``, TD3 and SAC actors with MLP extractors, and any policy
that is ``action_net(features_extractor(obs))`` such as the ARS linear/MLP policies, on flat Box observations and
Box or Discrete actions) run as float32 numpy maths on weights sliced once per candidate from the flat parameter
vector, once a probe on random weights (:class:`KernelProbe`) has shown that they give ``predict``'s actions.
Anything else runs through copies of the torch policy. The numpy maths is one :class:`LayerStack`, which the
collection workers' actor-critic also uses (with one set of weights for the batch).

The numpy path is batch-invariant: a slot's actions depend only on its own weights and observation, whatever the
other slots hold, because each slot's matrix product is a separate BLAS call of the same shape.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

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


class LayerStack:
    """
    Dense layers evaluated in float32 numpy on a batch of inputs, into buffers allocated once: the one MLP kernel,
    with one candidate's weights per row (evaluation) or one policy's weights shared by every row (collection).

    Each layer is one matrix product: a bias is folded into its weight matrix as an extra column that meets a
    constant 1 appended to the layer's input, and activations write straight into the next layer's input. A step of
    a two-hidden-layer MLP is about ten numpy calls, whatever the number of rows. With weights per row, the product
    is a batched matrix-vector product, so a row's outputs depend only on its weights and input, whatever the other
    rows hold (each row's product is a separate BLAS call of the same shape); shared weights make it one
    matrix-matrix product of the whole batch.

    :param layers: The dense layers, in order.
    :param n_rows: Rows of the batch. With shared weights a larger batch may come: the buffers grow to it.
    :param shared_weights: One set of weights (row 0's) for every row, rather than one set per row.
    """

    def __init__(self, layers: Sequence[DenseLayer], n_rows: int, *, shared_weights: bool = False) -> None:
        self.layers = tuple(layers)
        self.shared_weights = shared_weights
        self._with_bias = [int(layer.bias_offset is not None) for layer in self.layers]
        self._weights = [
            np.zeros((1 if shared_weights else n_rows, layer.out_features, layer.in_features + bias), np.float32)
            for layer, bias in zip(self.layers, self._with_bias, strict=True)
        ]
        self._allocate(n_rows)

    def _allocate(self, n_rows: int) -> None:
        self.n_rows = n_rows
        self._inputs = [
            np.ones((n_rows, layer.in_features + bias), np.float32)
            for layer, bias in zip(self.layers, self._with_bias, strict=True)
        ]
        self._outputs = [np.zeros((n_rows, layer.out_features), np.float32) for layer in self.layers]
        self._plans: dict[int, _StackPlan] = {}

    def load(self, weights: np.ndarray, row: int = 0) -> None:
        """
        :param weights: A flat parameter vector, as ``parameters_to_vector(policy.parameters())``.
        :param row: The row that acts with them (0 with shared weights).
        """
        for layer, weight in zip(self.layers, self._weights, strict=True):
            size = layer.out_features * layer.in_features
            matrix = weights[layer.weight_offset : layer.weight_offset + size]
            weight[row, :, : layer.in_features] = matrix.reshape(layer.out_features, layer.in_features)
            if layer.bias_offset is not None:
                weight[row, :, layer.in_features] = weights[layer.bias_offset : layer.bias_offset + layer.out_features]

    def forward(self, inputs: np.ndarray) -> np.ndarray:
        """
        :param inputs: One flat input per row, shape ``(rows, in_features)`` (cast to float32); with weights per
            row, at most ``n_rows`` rows (the first ones).
        :return: The last layer's outputs, shape ``(rows, out_features)``: a buffer of the stack, which the next
            call overwrites.
        """
        count = len(inputs)
        if count > self.n_rows:
            if not self.shared_weights:
                raise ValueError(f"{count} inputs for a stack of {self.n_rows} rows of weights")
            self._allocate(count)
        plan = self._plans.get(count)
        if plan is None:
            plan = self._plans[count] = self._plan(count)
        np.copyto(plan.observations, inputs, casting="same_kind")
        for left, right, product, output, activation, destination in plan.layers:
            np.matmul(left, right, out=product)
            target = output if destination is None else destination
            if activation == "relu":
                np.maximum(output, 0.0, out=target)
            elif activation == "tanh":
                np.tanh(output, out=target)
            elif destination is not None:
                np.copyto(destination, output)
        return plan.result

    def _plan(self, count: int) -> _StackPlan:
        """Views of the buffers for a batch of ``count`` rows."""
        inputs = [buffer[:count] for buffer in self._inputs]
        outputs = [buffer[:count] for buffer in self._outputs]
        weights = self._weights if self.shared_weights else [weight[:count] for weight in self._weights]
        destinations: list[np.ndarray | None] = [
            next_input[:, : layer.out_features] for next_input, layer in zip(inputs[1:], self.layers, strict=False)
        ]
        destinations.append(None)
        # Per layer: the two factors of its product and where it goes, the output, its activation and where the
        # activation writes.
        layers = [
            (*self._product(weight, layer_input, output), output, layer.activation, destination)
            for weight, layer_input, output, layer, destination in zip(
                weights, inputs, outputs, self.layers, destinations, strict=True
            )
        ]
        return _StackPlan(inputs[0][:, : self.layers[0].in_features], layers, outputs[-1])

    def _product(
        self, weight: np.ndarray, layer_input: np.ndarray, output: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:return: A layer's product as ``matmul(left, right, out=product)``: with shared weights, the batch times
        the transposed matrix; with weights per row, (rows, features, 1) columns, so that each row's product is a
        matrix-vector product of its own."""
        if self.shared_weights:
            return layer_input, weight[0].T, output
        return weight, layer_input[:, :, None], output[:, :, None]


class _StackPlan(NamedTuple):
    observations: np.ndarray
    layers: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str | None, np.ndarray | None]]
    result: np.ndarray


class NumpyMlpPolicy(BatchedPolicy):
    """
    Float32 numpy evaluation of an :class:`MlpLayout` through a :class:`LayerStack` with one candidate's weights
    per slot.

    :param layout: The policy's layout.
    :param n_slots: Number of slots.
    """

    def __init__(self, layout: MlpLayout, n_slots: int) -> None:
        super().__init__(n_slots)
        self.layout = layout
        self.stack = LayerStack(layout.layers, n_slots)
        space = layout.action_space
        if isinstance(space, spaces.Box):
            low = space.low.reshape(-1).astype(np.float32)
            high = space.high.reshape(-1).astype(np.float32)
            self._low, self._high = low, high
            self._half_range = np.float32(0.5) * (high - low)
            self._middle = low + self._half_range
            self._action_shape: tuple[int, ...] = (n_slots, *space.shape)

    def load(self, slot: int, weights: np.ndarray) -> None:
        self.stack.load(weights, slot)

    def act(self, observations: Any, slots: list[int]) -> np.ndarray:
        last = self.stack.forward(observations.reshape(self.n_slots, -1))
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
        self._copies = [cpu_copy(policy) for _ in range(n_slots)]
        for copied in self._copies:
            copied.set_training_mode(False)
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


def _reproduces_predict(policy: BasePolicy, layout: MlpLayout) -> bool:
    """Whether the numpy kernel of ``layout`` gives ``policy.predict``'s actions on a :class:`KernelProbe`."""
    probe = KernelProbe.of(policy)
    kernel = NumpyMlpPolicy(layout, len(probe.observations))
    for slot in range(kernel.n_slots):
        kernel.load(slot, probe.weights)
    actions = kernel.act(probe.observations, list(range(kernel.n_slots)))
    with th.no_grad():
        expected, _ = probe.policy.predict(probe.observations, deterministic=True)
    return probe.matches(actions, expected, exact=isinstance(layout.action_space, spaces.Discrete))


#: Random probes of a numpy kernel against the torch policy: how many observations, their spread, and the tolerance.
PROBE_OBSERVATIONS = 8
PROBE_OBSERVATION_STD = 3.0
PROBE_TOLERANCE = 1e-4


@dataclass(frozen=True)
class KernelProbe:
    """
    Random weights and observations on which a numpy kernel must give what the torch policy gives: recognising a
    policy's shape by its modules says nothing of what its ``forward`` does with them, so a policy that does more
    (or something else) keeps the torch path. Build it with :meth:`of`.

    :param policy: A copy of the policy on the CPU, in eval mode, holding :attr:`weights`.
    :param weights: Random flat float32 weights.
    :param observations: ``PROBE_OBSERVATIONS`` random float32 observations.
    """

    policy: BasePolicy
    weights: np.ndarray
    observations: np.ndarray

    @classmethod
    def of(cls, policy: BasePolicy) -> KernelProbe:
        """
        :param policy: The policy a kernel stands for (not modified).
        :return: The probe, the same for every call (a fixed seed).
        """
        rng = np.random.default_rng(0)
        probe = cpu_copy(policy)
        probe.set_training_mode(False)
        weights = rng.normal(0.0, 0.5, sum(parameter.numel() for parameter in probe.parameters())).astype(np.float32)
        probe.load_from_vector(weights)
        shape = (PROBE_OBSERVATIONS, *(policy.observation_space.shape or ()))
        observations = rng.normal(0.0, PROBE_OBSERVATION_STD, shape).astype(np.float32)
        return cls(probe, weights, observations)

    @staticmethod
    def matches(actual: np.ndarray, expected: np.ndarray | th.Tensor, *, exact: bool = False) -> bool:
        """
        :param actual: What the kernel computed on the probe.
        :param expected: What the torch policy computed.
        :param exact: Equal values needed (discrete actions), not values within ``PROBE_TOLERANCE``.
        :return: Whether they agree.
        """
        reference = expected.numpy() if isinstance(expected, th.Tensor) else np.asarray(expected)
        if exact:
            return bool(np.array_equal(actual, reference))
        return bool(np.allclose(actual, reference, rtol=PROBE_TOLERANCE, atol=PROBE_TOLERANCE))


def policy_copy(policy: BasePolicy) -> BasePolicy:
    """
    :param policy: The trainer's policy.
    :return: A new policy of the same class and arguments with the same weights, on the CPU (built as
        Stable-Baselines3 rebuilds a saved policy: a deep copy fails on gSDE's sampled noise tensors).
    """
    copied = type(policy)(**policy._get_constructor_parameters())
    copied.load_state_dict(policy.state_dict())
    return copied.to("cpu")


def cpu_copy(policy: BasePolicy) -> BasePolicy:
    """
    :param policy: A policy.
    :return: A deep copy of it on the CPU, or where a deep copy fails (on gSDE's sampled noise tensors) a
        :func:`policy_copy`.
    """
    try:
        return copy.deepcopy(policy).to("cpu")
    except RuntimeError:
        return policy_copy(policy)


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
