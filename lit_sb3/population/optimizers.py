"""Optimisers that follow a search gradient: ClipUp (Toklu et al., 2020) beside torch's Adam and SGD."""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch as th

from lit_sb3.checks import check_scale, check_unit_interval


class ClipUp(th.optim.Optimizer):
    """
    ClipUp: https://arxiv.org/abs/2008.02387 (Toklu, Liskowski and Srivastava, "ClipUp: A Simple and Powerful
    Optimizer for Distribution-based Policy Evolution", PPSN 2020).

    Gradient steps of fixed length ``lr`` (the gradient is normalised), accumulated with heavy-ball momentum into a
    velocity whose norm is clipped to ``max_speed``. The step therefore depends on neither the scale of the returns
    nor the size of the gradient estimate, and ``max_speed`` bounds how far the centre moves in one round: the
    paper's rule of thumb is ``lr = max_speed / 2`` and an initial search radius of ``15 * max_speed``. As a torch
    optimiser it minimises (``step()`` moves against ``p.grad``); norms are taken over all the parameters of a
    parameter group, as if they were one flat vector. A zero gradient adds no step (the velocity only decays).

    :param params: The parameters (or parameter groups) to optimise.
    :param lr: The length of each normalised gradient step (the paper's alpha).
    :param momentum: The momentum coefficient (the paper's m), in [0, 1].
    :param max_speed: The largest velocity norm (the paper's v_max); None for twice ``lr`` (EvoTorch's default),
        which then follows a learning-rate schedule.
    :param weight_decay: L2 penalty coefficient, added to the gradient before it is normalised.
    """

    def __init__(
        self,
        params: Iterable[th.Tensor] | Iterable[dict[str, Any]],
        lr: float = 0.075,
        momentum: float = 0.9,
        max_speed: float | None = None,
        weight_decay: float = 0.0,
    ) -> None:
        check_scale("lr", lr, allow_zero=True)
        check_unit_interval("momentum", momentum)
        if max_speed is not None:
            check_scale("max_speed", max_speed)
        check_scale("weight_decay", weight_decay, allow_zero=True)
        defaults = {"lr": lr, "momentum": momentum, "max_speed": max_speed, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    @th.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """
        One update of every parameter group that has gradients.

        :param closure: Re-evaluates the model and returns the loss (optional, as in torch).
        :return: The loss ``closure`` returned, if given.
        """
        loss = None
        if closure is not None:
            with th.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [parameter for parameter in group["params"] if parameter.grad is not None]
            if not params:
                continue
            gradients = [parameter.grad + group["weight_decay"] * parameter for parameter in params]
            velocities = [self._velocity(parameter) for parameter in params]
            gradient_norm = _norm(gradients)
            # v <- m * v - alpha * g / ||g||  (a descent step: torch optimisers minimise)
            for velocity, gradient in zip(velocities, gradients, strict=True):
                velocity.mul_(group["momentum"])
                if gradient_norm > 0.0:
                    velocity.add_(gradient, alpha=-group["lr"] / gradient_norm)
            # v <- v * min(1, v_max / ||v||)
            max_speed = group["max_speed"] if group["max_speed"] is not None else 2.0 * group["lr"]
            speed = _norm(velocities)
            if speed > max_speed:
                for velocity in velocities:
                    velocity.mul_(max_speed / speed)
            # theta <- theta + v
            for parameter, velocity in zip(params, velocities, strict=True):
                parameter.add_(velocity)
        return loss

    def _velocity(self, parameter: th.Tensor) -> th.Tensor:
        state = self.state[parameter]
        if "velocity" not in state:
            state["velocity"] = th.zeros_like(parameter, memory_format=th.preserve_format)
        return state["velocity"]

    def speed(self) -> float:
        """:return: The norm of the velocity of every parameter (0 before the first step)."""
        velocities = [state["velocity"] for state in self.state.values() if "velocity" in state]
        return _norm(velocities) if velocities else 0.0


def _norm(tensors: list[th.Tensor]) -> float:
    """:return: The Euclidean norm of the tensors taken as one flat vector (summed in float64)."""
    return math.sqrt(sum(float(tensor.double().square().sum()) for tensor in tensors))


#: The optimisers chosen by name, as EvoTorch's ``optimizer`` argument names them.
OPTIMIZERS: dict[str, type[th.optim.Optimizer]] = {"adam": th.optim.Adam, "clipup": ClipUp, "sgd": th.optim.SGD}


def resolve_optimizer(name: str, optimizer: str | type[th.optim.Optimizer]) -> type[th.optim.Optimizer]:
    """
    :param name: The argument's name, for the message.
    :param optimizer: ``"adam"``, ``"clipup"`` or ``"sgd"`` (any case), or a torch optimiser class.
    :return: The optimiser class.
    :raises ValueError: for an unknown name or anything else.
    """
    if isinstance(optimizer, str) and optimizer.lower() in OPTIMIZERS:
        return OPTIMIZERS[optimizer.lower()]
    if isinstance(optimizer, type) and issubclass(optimizer, th.optim.Optimizer):
        return optimizer
    raise ValueError(
        f"{name} must be one of {', '.join(map(repr, OPTIMIZERS))} or a torch optimizer class, got {optimizer!r}"
    )


def check_optimizer_settings(optimizer: type[th.optim.Optimizer], settings: dict[str, Any]) -> None:
    """
    Check an optimiser's settings before any environment is made: Adam, SGD and ClipUp are built once over a
    stand-in parameter, so that their own checks of the values run; another class (which may need parameters of its
    own shapes) has its keywords matched to its signature.

    :param optimizer: The optimiser class.
    :param settings: Its keyword arguments besides the parameters.
    :raises TypeError: for a setting the optimiser does not take, or a value of the wrong type.
    :raises ValueError: for a value the optimiser refuses.
    """
    try:
        if optimizer in OPTIMIZERS.values():
            optimizer([th.zeros(1, requires_grad=True)], **settings)
        else:
            inspect.signature(optimizer).bind(None, **settings)
    except (TypeError, ValueError) as error:
        given = ", ".join(f"{name}={value!r}" for name, value in settings.items())
        message = f"the optimizer's settings are refused: {optimizer.__name__}({given}): {error}"
        raise (TypeError if isinstance(error, TypeError) else ValueError)(message) from error


def step_along(optimizer: th.optim.Optimizer, parameters: Iterable[th.Tensor], ascent: np.ndarray) -> None:
    """
    One optimiser step up a search gradient.

    :param optimizer: A torch optimiser over ``parameters``.
    :param parameters: The parameters, in the order of the flat vector ``ascent``.
    :param ascent: The direction of steepest ascent (the estimated search gradient), flat.
    :raises FloatingPointError: if the step would leave a value that is not finite in the parameters or in the
        optimiser's state (a gradient beyond float32, or whose square is, in Adam's second moment): nothing is
        changed then, and the same gradient is refused again.
    """
    parameters = list(parameters)
    state_before = copy.deepcopy(optimizer.state_dict())
    values_before = [parameter.detach().clone() for parameter in parameters]
    # The optimiser minimises: its gradient is the negated ascent direction.
    descent = th.as_tensor(-ascent, dtype=th.float32)
    offset = 0
    for parameter in parameters:
        parameter.grad = descent[offset : offset + parameter.numel()].view_as(parameter).to(parameter.device).clone()
        offset += parameter.numel()
    optimizer.step()
    state = [value for values in optimizer.state.values() for value in values.values() if isinstance(value, th.Tensor)]
    if all(bool(th.isfinite(tensor).all()) for tensor in [*parameters, *state]):
        return
    with th.no_grad():
        for parameter, value in zip(parameters, values_before, strict=True):
            parameter.copy_(value)
    optimizer.load_state_dict(state_before)
    raise FloatingPointError(
        f"the {type(optimizer).__name__} step along a search gradient of largest component "
        f"{np.abs(ascent).max():.3g} is not finite in float32, and was not taken: returns this large need fitness "
        "shaping by rank (ranking='centered') or smaller rewards"
    )
