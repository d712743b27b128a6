"""Hyper-parameter files of ``lit-sb3 train``: YAML in the shape of rl-zoo's (``hyperparams/ars.yml``).

A file is either rl-zoo's layout, one entry per environment id::

    HalfCheetah-v4:
      n_envs: 1
      policy: 'LinearPolicy'
      n_timesteps: !!float 1.25e7
      learning_rate: !!float 0.02
      n_delta: 32
      normalize: "dict(norm_obs=True, norm_reward=False)"

or one entry alone. Besides the algorithm's keyword arguments an entry may hold rl-zoo's ``n_envs``,
``n_timesteps``, ``policy``, ``normalize`` (true, false, a mapping or a ``dict(...)`` string),
``normalize_kwargs`` and, for algorithms that take an ``action_noise``, ``noise_type`` (``normal`` or
``ornstein-uhlenbeck``) and ``noise_std``. ``policy_kwargs`` and the other object-valued settings may be written
as rl-zoo writes them, ``"dict(net_arch=[64, 64], activation_fn=nn.Tanh)"``: the text is read as a literal
(``dict(...)`` calls, numbers, strings, lists, and names under ``nn``, ``th`` or ``torch``), never run.
``"lin_0.02"`` is a schedule falling linearly from 0.02 to 0, and ``train_freq: [1, "episode"]`` the tuple
Stable-Baselines3 takes, as in rl-zoo.
"""

from __future__ import annotations

import ast
import inspect
import math
import pathlib
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import torch as th
import yaml
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecNormalize

from lit_sb3.cli.common import CliError

#: rl-zoo settings an entry may hold besides the algorithm's arguments.
RUN_KEYS = frozenset({"n_envs", "n_timesteps", "policy", "normalize", "normalize_kwargs"})
#: rl-zoo settings that ``lit-sb3 train`` does not implement.
UNSUPPORTED_KEYS = frozenset(
    {"env_wrapper", "vec_env_wrapper", "frame_stack", "callback", "monitor_kwargs", "n_envs_eval", "eval_env"}
)
#: rl-zoo's spelling of ``action_noise``, for algorithms that take one.
NOISE_KEYS = frozenset({"noise_type", "noise_std"})
#: rl-zoo's noise types.
NOISE_TYPES = ("normal", "ornstein-uhlenbeck")
#: Arguments that ``lit-sb3 train`` sets itself (through its own options).
CLI_ARGUMENTS = frozenset(
    {"policy", "env", "seed", "tensorboard_log", "verbose", "device", "_init_setup_model", "use_mp", "n_workers"}
)
#: Settings whose string values are Python literals in rl-zoo files.
OBJECT_KEYS = frozenset(
    {
        "policy_kwargs",
        "normalize",
        "normalize_kwargs",
        "optimizer_kwargs",
        "optimizer_config",
        "cma_options",
        "replay_buffer_kwargs",
    }
)
#: The hyper-parameter files shipped with lit_sb3, ``ALGO.yml`` in rl-zoo's layout: the learning study's settings per
#: task (``benchmarks/learning_study.py``), which ``lit-sb3 train`` uses when no file is given.
TUNED_FOLDER = pathlib.Path(__file__).resolve().with_name("tuned")
#: The keyword arguments of ``VecNormalize`` a ``normalize`` setting may give.
VEC_NORMALIZE_ARGUMENTS = tuple(list(inspect.signature(VecNormalize.__init__).parameters)[2:])
#: Roots of the names an object-valued setting may use.
NAME_ROOTS: dict[str, Any] = {"nn": th.nn, "th": th, "torch": th}


@dataclass
class Hyperparams:
    """
    One entry of a hyper-parameter file.

    :param algo_kwargs: Keyword arguments of the algorithm.
    :param policy: Policy name, if the entry gives one.
    :param n_timesteps: Training budget, if given.
    :param n_envs: Sub-environments per environment, if given.
    :param normalize_kwargs: ``VecNormalize`` arguments if the entry normalises, else None.
    :param action_noise: rl-zoo's ``(noise_type, noise_std)`` if the entry gives them, else None.
    """

    algo_kwargs: dict[str, Any] = field(default_factory=dict)
    policy: str | None = None
    n_timesteps: int | None = None
    n_envs: int | None = None
    normalize_kwargs: dict[str, Any] | None = None
    action_noise: tuple[str, float] | None = None


def algorithm_arguments(algo_class: type) -> list[str]:
    """
    :param algo_class: An algorithm class; the ``__init__`` of a subclass that passes ``**kwargs`` on (such as
        :func:`~lit_sb3.agents.async_agent.get_injected_agent`'s) adds its own keywords to its base's.
    :return: The keyword arguments of ``algo_class`` a hyper-parameter file may set.
    """
    names: set[str] = set()
    for klass in algo_class.__mro__:
        if "__init__" not in klass.__dict__:
            continue
        parameters = list(inspect.signature(klass.__dict__["__init__"]).parameters.values())[1:]
        names.update(item.name for item in parameters if item.kind not in {item.VAR_POSITIONAL, item.VAR_KEYWORD})
        if all(item.kind is not item.VAR_KEYWORD for item in parameters):
            break
    return sorted(names - CLI_ARGUMENTS)


def tuned_env_ids(algo_name: str) -> list[str]:
    """:return: The environment ids of the shipped file of ``algo_name`` (none without a file)."""
    path = TUNED_FOLDER / f"{algo_name}.yml"
    return list(yaml.safe_load(path.read_text())) if path.is_file() else []


def tuned_file(algo_name: str, env_id: str) -> pathlib.Path | None:
    """:return: The shipped file of ``algo_name`` if it has an entry for ``env_id``, else None."""
    return TUNED_FOLDER / f"{algo_name}.yml" if env_id in tuned_env_ids(algo_name) else None


def load_hyperparams(
    path: str | pathlib.Path, env_id: str, algo_class: type, *, reward_normalization: bool = False
) -> Hyperparams:
    """
    :param path: A YAML file, rl-zoo's layout or one entry.
    :param env_id: The environment trained on: its entry is used in rl-zoo's layout.
    :param algo_class: The algorithm, whose arguments an entry may set.
    :param reward_normalization: Whether ``normalize`` normalises rewards too unless the entry says otherwise
        (``VecNormalize``'s and rl-zoo's default, right for gradient agents; population methods rank candidates by
        their raw returns, so they default to False).
    :return: The entry.
    :raises CliError: for a missing or unreadable file, bad YAML, no entry for ``env_id``, an unknown or unsupported
        setting, or a value that cannot be read.
    """
    source = pathlib.Path(path)
    if not source.is_file():
        raise CliError(f"hyper-parameter file {str(source)!r} does not exist")
    try:
        document = yaml.safe_load(source.read_text())
    except (yaml.YAMLError, ValueError, RecursionError) as error:  # a ValueError: a date such as 2001-02-30
        raise CliError(f"bad YAML in {source}: {' '.join(str(error).split())}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read {source}: {error}") from None
    if not isinstance(document, dict):
        raise CliError(f"{source} must hold a mapping of hyper-parameters (or of environment ids to them)")
    known = algorithm_arguments(algo_class)
    if env_id in document:
        entry = document[env_id]
    elif any(key in RUN_KEYS or key in NOISE_KEYS or key in known for key in document):
        entry = document
    else:
        entries = ", ".join(
            key if isinstance(key, str) and key.isprintable() and key else repr(key) for key in document
        )
        raise CliError(f"{source} has no entry for {env_id} (it has {entries})")
    if not isinstance(entry, dict):
        raise CliError(f"{source}: the entry for {env_id} must be a mapping of hyper-parameters")
    return _parse_entry(entry, source, algo_class.__name__, known, reward_normalization)


def _parse_entry(
    entry: dict[str, Any], source: pathlib.Path, algo_name: str, known: list[str], reward_normalization: bool
) -> Hyperparams:
    hyperparams = Hyperparams()
    normalize: Any = False
    normalize_kwargs: dict[str, Any] = {}
    noise: dict[str, Any] = {}
    for key, raw in entry.items():
        if key in UNSUPPORTED_KEYS:
            raise CliError(f"{source}: {key!r} (an rl-zoo setting) is not supported by lit-sb3 train")
        if key in NOISE_KEYS and "action_noise" in known:
            noise[key] = raw
            continue
        if key not in RUN_KEYS and key not in known:
            raise CliError(f"{source}: unknown hyper-parameter {key!r} for {algo_name} (known: {', '.join(known)})")
        value = _read_value(key, raw, source)
        if key == "policy":
            if not isinstance(value, str):
                raise CliError(f"{source}: policy must be a name such as 'LinearPolicy', got {value!r}")
            hyperparams.policy = value
        elif key in {"n_timesteps", "n_envs"}:
            if not _is_real(value) or not math.isfinite(value) or value < 1 or value != int(value):
                raise CliError(f"{source}: {key} must be a positive whole number, got {value!r}")
            setattr(hyperparams, key, int(value))
        elif key == "normalize":
            normalize = value
        elif key == "normalize_kwargs":
            if not isinstance(value, dict):
                raise CliError(f"{source}: normalize_kwargs must be a mapping, got {value!r}")
            normalize_kwargs.update(value)
        elif key.endswith("_kwargs") and not isinstance(value, dict | None):
            raise CliError(f"{source}: {key} must be a mapping, got {value!r}")
        else:
            hyperparams.algo_kwargs[key] = value
    if normalize_kwargs and normalize in (False, None):
        raise CliError(f"{source}: normalize_kwargs is given but normalize is not: add normalize: true")
    for name, value in {**(normalize if isinstance(normalize, dict) else {}), **normalize_kwargs}.items():
        if name not in VEC_NORMALIZE_ARGUMENTS:
            raise CliError(
                f"{source}: normalize: {name!r} is not an argument of VecNormalize "
                f"(known: {', '.join(VEC_NORMALIZE_ARGUMENTS)})"
            )
        _check_normalize_value(name, value, source)
    if isinstance(normalize, dict):
        hyperparams.normalize_kwargs = {"norm_reward": reward_normalization, **normalize, **normalize_kwargs}
    elif normalize is True:
        hyperparams.normalize_kwargs = {"norm_obs": True, "norm_reward": reward_normalization, **normalize_kwargs}
    elif normalize not in (False, None):
        raise CliError(
            f"{source}: normalize must be true, false or a dict of VecNormalize arguments, got {normalize!r}"
        )
    if hyperparams.normalize_kwargs is not None and "gamma" in hyperparams.algo_kwargs:
        hyperparams.normalize_kwargs["gamma"] = hyperparams.algo_kwargs["gamma"]  # rl-zoo's: the algorithm's discount
    if noise:
        hyperparams.action_noise = _read_noise(noise, source)
    return hyperparams


def _check_normalize_value(name: str, value: Any, source: pathlib.Path) -> None:
    """:raises CliError: if ``value`` is not one ``VecNormalize`` can use for its argument ``name``."""
    if name in {"training", "norm_obs", "norm_reward"}:
        if not isinstance(value, bool):
            raise CliError(f"{source}: normalize: {name} must be true or false, got {value!r}")
    elif name in {"clip_obs", "clip_reward", "epsilon"}:
        if not _is_real(value) or not value > 0 or (name == "epsilon" and not math.isfinite(value)):
            raise CliError(f"{source}: normalize: {name} must be a positive number, got {value!r}")
    elif name == "gamma" and (not _is_real(value) or not 0 <= value <= 1):
        raise CliError(f"{source}: normalize: gamma must be a number in [0, 1], got {value!r}")


def _is_real(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _read_noise(noise: dict[str, Any], source: pathlib.Path) -> tuple[str, float]:
    noise_type, noise_std = noise.get("noise_type"), noise.get("noise_std")
    if noise_type not in NOISE_TYPES:
        raise CliError(f"{source}: noise_type must be one of {', '.join(NOISE_TYPES)}, got {noise_type!r}")
    if not _is_real(noise_std) or not math.isfinite(noise_std) or noise_std < 0:
        raise CliError(f"{source}: noise_type needs a noise_std, a non-negative number, got {noise_std!r}")
    return noise_type, float(noise_std)


def _read_value(key: str, value: Any, source: pathlib.Path) -> Any:
    if key == "train_freq" and isinstance(value, list):
        return tuple(value)
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("lin_"):
        try:
            start = float(text[len("lin_") :])
        except ValueError:
            raise CliError(f"{source}: {key}: {value!r} is not a linear schedule such as 'lin_0.02'") from None
        return LinearSchedule(start, 0.0, 1.0)
    if key in OBJECT_KEYS or text.startswith(tuple(f"{root}." for root in NAME_ROOTS)):
        try:
            return read_literal(text)
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as error:  # TypeError: {[1]: 2}
            raise CliError(f"{source}: {key}: cannot read {value!r} ({error or type(error).__name__})") from None
    return value


def read_literal(text: str) -> Any:
    """
    Read a setting written as rl-zoo writes it, without running it.

    :param text: A Python literal, possibly with ``dict(...)`` calls and names such as ``nn.ReLU``.
    :return: Its value.
    :raises SyntaxError: if ``text`` is not a Python expression.
    :raises ValueError: if it uses anything but literals, ``dict(...)`` and names under ``nn``, ``th``, ``torch``.
    """
    return _literal(ast.parse(text, mode="eval").body)


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _literal(node.operand)
        if isinstance(operand, int | float) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.List):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_literal(item) for item in node.elts)
    if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
        return {_literal(key): _literal(value) for key, value in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and not node.args
        and all(keyword.arg is not None for keyword in node.keywords)
    ):
        return {keyword.arg: _literal(keyword.value) for keyword in node.keywords}
    if isinstance(node, ast.Attribute):
        return _named_object(node)
    raise ValueError(f"only literals, dict(...) and names under nn/th/torch are read, not {ast.unparse(node)!r}")


def _named_object(node: ast.Attribute) -> Any:
    parts: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name) or current.id not in NAME_ROOTS:
        raise ValueError(f"names must start with nn., th. or torch., got {ast.unparse(node)!r}")
    value = NAME_ROOTS[current.id]
    for part in reversed(parts):
        if part.startswith("_") or not hasattr(value, part):
            raise ValueError(f"{ast.unparse(node)!r} does not exist")
        value = getattr(value, part)
    return value
