"""What the ``lit-sb3`` commands share: the one-line user errors, environment checks and factories."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import pathlib
import sys
import tempfile
from typing import Any, NoReturn

import gymnasium as gym
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

#: Sub-environments per worker of a population method when neither the command line nor the file says: a worker
#: steps them in turn and evaluates their policies in one batched call, so its per-step overhead is shared (2 workers
#: on HalfCheetah-v5: 1.2-1.3x the env steps per second of one each, on Hopper-v5 1.08x). Results do not depend on it.
POPULATION_N_ENVS = 8


class CliError(Exception):
    """A mistake of the user: ``main()`` prints its message on one line and exits with status 1."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (the command, the problem, where to find help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class ExampleFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples of an epilog as written."""


def seed_value(text: str) -> int:
    """
    :param text: A ``--seed`` option's value.
    :return: The seed: an int in [0, 2**32 - 1], the range of numpy's and Gymnasium's seeds.
    :raises argparse.ArgumentTypeError: for anything else (a usage error naming the option).
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an int, got {text!r}") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32 - 1], got {value}")
    return value


def check_env_id(env_id: str) -> None:
    """
    :param env_id: A gymnasium environment id, possibly ``module:id`` as ``gymnasium.make`` takes it (the module
        registers the environment when imported).
    :raises CliError: if gymnasium does not know it.
    """
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        gym.spec(name)
    except gym.error.Error as error:
        message = " ".join(str(error).split())
        raise CliError(f"unknown environment id {env_id!r}: {message}") from None
    except ModuleNotFoundError as error:
        raise CliError(f"environment id {env_id!r} needs the module {error.name!r}, which is not installed") from None


def require_module(module: str, purpose: str, install: str) -> None:
    """
    :param module: An importable module name.
    :param purpose: What needs it, for the message.
    :param install: What to install, for the message.
    :raises CliError: if the module cannot be imported.
    """
    try:
        importlib.import_module(module)
    except ImportError:
        raise CliError(f"{purpose} needs {module}, which is not installed: pip install {install}") from None


def check_output_folder(folder: pathlib.Path, option: str) -> None:
    """
    Check that outputs can be written to ``folder``: create what is missing of it, write a file there, then remove
    what was created (``os.access`` says yes to root even where nothing can be created).

    :param folder: Where the outputs go (created when they are written).
    :param option: The command-line option that names it, for the error.
    :raises CliError: if a file stands on its path or the folder cannot be created or written to.
    """
    missing = list(itertools.takewhile(lambda path: not path.exists(), (folder, *folder.parents)))
    existing = folder.parents[len(missing) - 1] if missing else folder
    if not existing.is_dir():
        raise CliError(f"{option}: the outputs cannot go to {str(folder)!r}: {str(existing)!r} is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise CliError(f"{option}: the outputs cannot go to {str(folder)!r}: {error}") from error
    finally:
        for path in missing:  # innermost first; a folder another process has put something in meanwhile stays
            with contextlib.suppress(OSError):
                path.rmdir()


def make_env(
    env_id: str,
    n_envs: int = 1,
    normalize_kwargs: dict[str, Any] | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> VecEnv:
    """
    The environment of a ``lit-sb3`` run, as the model and every worker build it (picklable with
    ``functools.partial``).

    :param env_id: Gymnasium environment id.
    :param n_envs: Sub-environments (candidates a worker evaluates at once).
    :param normalize_kwargs: Wrap in ``VecNormalize`` with these arguments; None for no normalisation.
    :param env_kwargs: Keyword arguments of ``gymnasium.make``.
    :return: The vectorised environment.
    """
    env = make_vec_env(env_id, n_envs=n_envs, env_kwargs=env_kwargs)
    if normalize_kwargs is not None:
        env = VecNormalize(env, **normalize_kwargs)
    return env


def print_table(header: list[str], rows: list[list[str]], *, file: Any = None) -> None:
    """
    Print a table with right-aligned columns.

    :param header: Column titles.
    :param rows: Cells, already formatted.
    :param file: Where to print (standard output by default).
    """
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    for line in [header, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)), file=file or sys.stdout)
