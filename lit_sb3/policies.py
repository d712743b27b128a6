"""Deterministic policies searched by population methods: their flat parameter vector is the search space.

The module layout (a flattening features extractor, then ``action_net``) and so the flat parameter order
(``parameters_to_vector`` / ``load_from_vector``) are those of sb3-contrib's ARS policies: weight vectors and
``state_dict`` entries move between the two unchanged.
"""

from __future__ import annotations

from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import get_action_dim
from stable_baselines3.common.torch_layers import create_mlp
from stable_baselines3.common.type_aliases import PyTorchObs
from torch import nn


class MlpPolicy(BasePolicy):
    """
    Deterministic multi-layer perceptron policy.

    Box actions are the network's output clipped to the action bounds, or, with ``squash_output``, squashed by
    ``tanh`` and rescaled to the bounds. Discrete actions are the argmax of the outputs. ``deterministic`` is
    ignored by ``predict``: the policy has no randomness (exploration is the population's).

    :param observation_space: The observation space of the environment.
    :param action_space: The action space of the environment (Box or Discrete).
    :param net_arch: Sizes of the hidden layers, ``[]`` for a linear policy; defaults to ``[64, 64]``.
    :param activation_fn: Activation function of the hidden layers.
    :param with_bias: Whether the layers have an additive bias.
    :param squash_output: For Box actions, whether to squash the output with ``tanh`` instead of clipping it.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        net_arch: list[int] | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
        *,
        with_bias: bool = True,
        squash_output: bool = True,
    ) -> None:
        if not isinstance(action_space, spaces.Box | spaces.Discrete):
            raise ValueError(f"action_space must be Box or Discrete for {type(self).__name__}, got {action_space}")
        if isinstance(action_space, spaces.Box) and squash_output and not action_space.is_bounded():
            raise ValueError(
                f"squash_output=True squashes actions into the bounds of action_space, which has infinite bounds "
                f"({action_space}): use squash_output=False (actions are then clipped to the bounds)"
            )
        super().__init__(
            observation_space, action_space, squash_output=isinstance(action_space, spaces.Box) and squash_output
        )
        self.net_arch = [64, 64] if net_arch is None else list(net_arch)
        self.activation_fn = activation_fn
        self.with_bias = with_bias
        self.features_extractor = self.make_features_extractor()
        self.features_dim = self.features_extractor.features_dim
        n_outputs = get_action_dim(action_space) if isinstance(action_space, spaces.Box) else int(action_space.n)
        layers = create_mlp(
            self.features_dim,
            n_outputs,
            self.net_arch,
            activation_fn,
            with_bias=with_bias,
            squash_output=self.squash_output,
        )
        self.action_net = nn.Sequential(*layers)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {
            "observation_space": self.observation_space,
            "action_space": self.action_space,
            "net_arch": self.net_arch,
            "activation_fn": self.activation_fn,
            "with_bias": self.with_bias,
            "squash_output": self.squash_output,
        }

    def forward(self, obs: PyTorchObs) -> th.Tensor:
        output = self.action_net(self.extract_features(obs, self.features_extractor))
        if isinstance(self.action_space, spaces.Discrete):
            return th.argmax(output, dim=1)
        return output

    def _predict(self, observation: PyTorchObs, deterministic: bool = True) -> th.Tensor:
        return self(observation)


class LinearPolicy(MlpPolicy):
    """
    Deterministic linear policy: ``action = W @ observation`` (plus a bias if ``with_bias``), as in the ARS paper.

    :param observation_space: The observation space of the environment.
    :param action_space: The action space of the environment (Box or Discrete).
    :param with_bias: Whether the linear map has an additive bias.
    :param squash_output: For Box actions, whether to squash the output with ``tanh`` instead of clipping it.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        *,
        with_bias: bool = False,
        squash_output: bool = False,
    ) -> None:
        super().__init__(observation_space, action_space, net_arch=[], with_bias=with_bias, squash_output=squash_output)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        parameters = super()._get_constructor_parameters()
        del parameters["net_arch"], parameters["activation_fn"]
        return parameters
