"""
async-gym-agents' own scripts (``test/test.py``, ``test/compare.py``, ``test/truncating.py``), where they come from
and how they are turned to lit_sb3.

Its sdists (0.1.0 to 0.5.0) hold the package only, not ``test/``, so the scripts are taken from its repository at
:data:`COMMIT` (the newest commit that changed them), checked against their SHA-256 and cached
(``$LIT_SB3_CACHE``, else ``~/.cache/lit_sb3``), never kept in this repository: from a checkout named by
``$LIT_SB3_ASYNC_GYM_AGENTS_SOURCE``, else downloaded from GitHub. The environments they import from the package
(``SlowCartPoleEnv``, ``ThreadedVecEnv``, ``BuggyLunarLander``) are test fixtures, taken from its sdist on PyPI; only
the two imports of what lit_sb3 replaces (the agents and ``IndexableMultiEnv``) are changed.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import urllib.request

from conformance.upstream import cache_folder, unpacked_sdist

REPOSITORY = "Luke100000/async-gym-agents"
COMMIT = "df0dabe0c9f5e4fd2a28e9d0acbd86c73c56158c"
#: The scripts run, by file name under ``test/``, with their SHA-256 at :data:`COMMIT`.
SCRIPTS = {
    "test.py": "d327e2b977ba57e2c0419378e8f236b24adf095588f56fe297f95c680bbbcec1",
    "compare.py": "5dbac8a1dde264fa401d950e1ff0c11a018affdac8214793fe33309557db7c42",
    "truncating.py": "9757671a0ae6dbdadef34794edbebde78217d0fd04205c67da0e7b9a1daeaf7c",
}
SOURCE_VARIABLE = "LIT_SB3_ASYNC_GYM_AGENTS_SOURCE"
#: The sdist whose environments the scripts import.
FIXTURES_VERSION = "0.5.0"
FIXTURE_MODULES = ("slow_cartpole.py", "threaded_env.py", "buggy_lunar_lander.py")
#: The imports changed: async-gym-agents' module -> lit_sb3's.
IMPORTS = {
    "async_gym_agents.agents.async_agent": "lit_sb3.agents.async_agent",
    "async_gym_agents.envs.multi_env": "lit_sb3.envs.multi_env",
}


class SourceUnavailableError(RuntimeError):
    """The scripts could not be found in a checkout, the cache or on GitHub."""


def script_path(name: str) -> pathlib.Path:
    """
    :param name: A file of :data:`SCRIPTS`.
    :return: Its cached copy (checked against its SHA-256), fetched on first use.
    :raises SourceUnavailableError: if neither a checkout nor GitHub has it, saying what to do.
    """
    cached = cache_folder() / "conformance" / f"async-gym-agents-{COMMIT[:12]}" / "test" / name
    if cached.is_file() and _digest(cached.read_bytes()) == SCRIPTS[name]:
        return cached
    text = _from_checkout(name) if os.environ.get(SOURCE_VARIABLE) else _from_github(name)
    if _digest(text) != SCRIPTS[name]:
        raise SourceUnavailableError(
            f"async-gym-agents' test/{name} differs from the file at commit {COMMIT} (SHA-256 mismatch): check out "
            f"that commit (git checkout {COMMIT}) in ${SOURCE_VARIABLE}"
        )
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.part")
    partial.write_bytes(text)
    partial.replace(cached)  # atomic: a concurrent run finds the whole file or none
    return cached


def _digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _from_checkout(name: str) -> bytes:
    path = pathlib.Path(os.environ[SOURCE_VARIABLE]) / "test" / name
    if not path.is_file():
        raise SourceUnavailableError(f"${SOURCE_VARIABLE} names {path.parent.parent}, which has no test/{name}")
    return path.read_bytes()


def _from_github(name: str) -> bytes:
    url = f"https://raw.githubusercontent.com/{REPOSITORY}/{COMMIT}/test/{name}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            content: bytes = response.read()
    except OSError as error:
        raise SourceUnavailableError(
            f"async-gym-agents' test/{name} is not in its sdists and GitHub is out of reach ({url}: {error}); "
            f"clone https://github.com/{REPOSITORY} and point ${SOURCE_VARIABLE} at the checkout"
        ) from error
    return content


def fixtures_root() -> pathlib.Path:
    """
    :return: A folder holding ``async_gym_agents/envs/`` with the environments the scripts import, from the sdist of
        :data:`FIXTURES_VERSION` (fetched and unpacked on first use; the package's agents are left out, so that
        nothing of async-gym-agents but its test environments can be imported).
    """
    root = cache_folder() / "conformance" / f"async-gym-agents-{FIXTURES_VERSION}-envs"

    def wanted(parts: list[str]) -> bool:
        return parts[:2] == ["async_gym_agents", "envs"] and parts[-1] in FIXTURE_MODULES

    return unpacked_sdist("async-gym-agents", FIXTURES_VERSION, root, wanted, root / "async_gym_agents" / "envs")


def with_lit_sb3_imports(source: str) -> str:
    """
    :param source: A script of async-gym-agents.
    :return: It with the modules of :data:`IMPORTS` imported from lit_sb3 (nothing else changed).
    :raises ValueError: if a script does not import one of them (the harness would test nothing of lit_sb3).
    """
    changed = source
    for module, replacement in IMPORTS.items():
        changed = changed.replace(f"from {module} import", f"from {replacement} import")
    if changed == source:
        raise ValueError("the script imports neither async-gym-agents' agents nor its IndexableMultiEnv")
    return changed
