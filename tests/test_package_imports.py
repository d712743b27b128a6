"""What importing lit_sb3 and its parts costs: the parts a worker needs do not import the rest."""

from __future__ import annotations

import subprocess
import sys

import pytest

import lit_sb3


def imported_after(statement: str) -> set[str]:
    """:return: The top modules and lit_sb3 subpackages loaded by ``statement`` in a fresh interpreter."""
    script = f"{statement}\nimport sys\nprint(' '.join(sys.modules))"
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    return {name if name.startswith("lit_sb3.") else name.split(".")[0] for name in output.split()}


def test_a_worker_process_imports_neither_the_optimisers_nor_cma() -> None:
    # What the fork server imports before it starts AsyncEval's workers (BASE_PRELOAD and the evaluator's module).
    loaded = imported_after("import torch, threadpoolctl, lit_sb3.workers.local, lit_sb3.evaluation.evaluator")
    assert "lit_sb3.evaluation.evaluator" in loaded
    assert not loaded & {"cma", "matplotlib", "lit_sb3.population", "lit_sb3.agents", "lit_sb3.engine", "lit_sb3.cli"}


def test_every_public_name_resolves_and_is_listed() -> None:
    loaded = imported_after("import lit_sb3")
    assert not loaded & {"torch", "cma", "lit_sb3.population"}  # names are imported when first used
    for name in lit_sb3.__all__:
        value = getattr(lit_sb3, name)
        assert value.__name__ == name and value.__module__.startswith("lit_sb3.")
    assert set(lit_sb3.__all__) <= set(dir(lit_sb3))
    # As when the package imported every part: its subpackages are attributes once it is imported.
    imported_after("import lit_sb3; lit_sb3.population.ARS; lit_sb3.vec_env.AsyncEval; lit_sb3.workers.errors")
    assert {"population", "vec_env", "workers"} <= set(dir(lit_sb3))
    with pytest.raises(AttributeError, match="no attribute 'AsyncEvaluation'"):
        lit_sb3.AsyncEvaluation  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(lit_sb3, "cli.__main__")  # a dotted name is not a part: nothing is imported (or run)
