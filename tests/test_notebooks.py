"""The notebooks run top to bottom on a real Jupyter kernel, on a tiny budget set through the environment."""

from __future__ import annotations

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"


def execute(name: str, tmp_path: pathlib.Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    client = NotebookClient(notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": tmp_path}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if a cell fails
    return notebook


def outputs(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]


def test_notebooks_are_committed_with_their_outputs() -> None:
    assert sorted(path.name for path in NOTEBOOKS_DIR.glob("*.ipynb")) == [
        "optimiser_comparison.ipynb",
        "population_study.ipynb",
    ]
    for path in NOTEBOOKS_DIR.glob("*.ipynb"):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert all(cell.execution_count is not None for cell in code_cells), path.name
        assert any("image/png" in output.get("data", {}) for output in outputs(notebook)), path.name
        assert not any(output.output_type == "error" for output in outputs(notebook)), path.name


def test_population_study_runs(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIT_SB3_NOTEBOOK_TIMESTEPS", "1500")
    notebook = execute("population_study.ipynb", tmp_path)
    figures = [output for output in outputs(notebook) if "image/png" in output.get("data", {})]
    assert len(figures) == 3  # return violins, noise scales, episode-length spread
    text = "".join(output.get("text", "") for output in outputs(notebook))
    assert "1,500 env steps per run on CartPole-v1" in text
    for name in ("ARS", "CEM", "ES", "delta_std=0.05", "sigma=0.1"):
        assert name in text
    assert "candidates; their episode lengths spread by" in text


def test_optimiser_comparison_runs(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIT_SB3_NOTEBOOK_TIMESTEPS", "1500")
    monkeypatch.setenv("LIT_SB3_NOTEBOOK_SEEDS", "2")
    notebook = execute("optimiser_comparison.ipynb", tmp_path)
    assert sum("image/png" in output.get("data", {}) for output in outputs(notebook)) == 1
    [table] = [
        output["data"]["text/markdown"] for output in outputs(notebook) if "text/markdown" in output.get("data", {})
    ]
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    assert [row[0].strip() for row in rows] == ["ARS", "ES", "CEM", "CMA-ES"]
    for row in rows:
        reached, runs = map(int, row[1].split("/"))
        assert runs == 2 and 0 <= reached <= 2
        assert 8 <= float(row[4]) <= 500  # a CartPole return
