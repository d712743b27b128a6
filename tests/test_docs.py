"""The documentation is true: every Python block of the README and docs/ runs, the benchmark tables match their
result files, and the references list every public name and every command-line option.

A block runs as a user runs it: saved as a script in an empty folder and started with this Python. A comment
``<!-- test: TAG -->`` on the line before a block marks what it needs: ``slow`` (left out of the default run),
``ray``, ``mujoco`` (skipped where the package is missing), ``cli`` (the ``lit-sb3`` command on the PATH).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(?:<!-- test: (?P<tags>[\w ,]+) -->\n)?```python\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)
KNOWN_TAGS = {"slow", "ray", "mujoco", "cli"}
#: Seconds a block may take (a docs block is a small run).
BLOCK_TIMEOUT = 180
#: A row of a result table.
Row = dict[str, Any]


@dataclass(frozen=True)
class CodeBlock:
    """A Python block of a page: where it is, its code and its tags."""

    page: pathlib.Path
    line: int
    code: str
    tags: frozenset[str]

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def all_code_blocks() -> list[CodeBlock]:
    """:return: Every Python block of the README and the docs, in page order."""
    blocks = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            tags = frozenset(tag for tag in re.split(r"[ ,]+", match.group("tags") or "") if tag)
            line = text.count("\n", 0, match.start("code"))
            blocks.append(CodeBlock(page, line, match.group("code"), tags))
    return blocks


def code_blocks() -> list[CodeBlock]:
    """:return: Every Python block, the same code once (the README repeats some of the docs' examples)."""
    unique: dict[str, CodeBlock] = {}
    for block in all_code_blocks():
        unique.setdefault(block.code, block)
    return list(unique.values())


def marks(block: CodeBlock) -> list[pytest.MarkDecorator]:
    found = []
    if "slow" in block.tags:
        found.append(pytest.mark.slow)
    for module in ("ray", "mujoco"):
        if module in block.tags and importlib.util.find_spec(module) is None:
            found.append(pytest.mark.skip(reason=f"needs {module}, which is not installed"))
    return found


@pytest.mark.parametrize("block", [pytest.param(block, id=block.name, marks=marks(block)) for block in code_blocks()])
def test_code_block_runs(block: CodeBlock, tmp_path: pathlib.Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(block.code)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=False,
    )
    assert completed.returncode == 0, f"{block.name} failed:\n{completed.stderr[-4000:]}"


def test_blocks_are_found_and_tagged_with_known_tags() -> None:
    blocks = code_blocks()
    assert len(blocks) >= 15
    assert {block.page.name for block in blocks} >= {"README.md", "async-eval.md", "engines.md", "ray.md"}
    first_of = {block.code: block for block in reversed(all_code_blocks())}
    for block in all_code_blocks():
        assert block.tags <= KNOWN_TAGS, f"{block.name}: unknown tags {sorted(block.tags - KNOWN_TAGS)}"
        assert block.tags == first_of[block.code].tags, (
            f"{block.name} repeats {first_of[block.code].name}, not its tags"
        )


def test_a_failing_block_fails(tmp_path: pathlib.Path) -> None:
    block = CodeBlock(ROOT / "README.md", 1, "raise SystemExit('broken example')\n", frozenset())
    with pytest.raises(AssertionError, match="broken example"):
        test_code_block_runs(block, tmp_path)


# ------------------------------------------------------------------------------------------ benchmark tables


def render_results() -> object:
    spec = importlib.util.spec_from_file_location("render_results", ROOT / "benchmarks" / "render_results.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_tables_match_their_result_files() -> None:
    renderer = render_results()
    results = renderer.load_results()  # type: ignore[attr-defined]
    assert sorted(results) == [
        "asynceval_vs_sb3contrib",
        "chaos_local",
        "chaos_ray",
        "engine",
        "gradient_agents",
        "gradient_agents_sac_seeds",
        "learning_study",
        "learning_study_mujoco",
        "ray_backend",
        "soak",
    ]
    assert renderer.stale_pages(PAGES, results) == []  # type: ignore[attr-defined]
    rendered = "".join(page.read_text() for page in PAGES)
    for name, result in results.items():
        assert f"<!-- result: {name} -->" in rendered, f"the provenance of {name} is on no page"
        for table in result.tables:
            assert f"<!-- result: {name}/{table} -->" in rendered, f"{name}/{table} is on no page"


def test_figures_match_their_notebooks() -> None:
    assert render_results().stale_figures() == []  # type: ignore[attr-defined]


def test_a_changed_figure_makes_the_page_stale() -> None:
    renderer = render_results()
    results = renderer.load_results()  # type: ignore[attr-defined]
    results["engine"].tables["engine"].rows[0]["steps_per_second"] += 1
    assert renderer.stale_pages([ROOT / "docs" / "benchmarks.md"], results) == [ROOT / "docs" / "benchmarks.md"]  # type: ignore[attr-defined]


def test_result_cells_are_written_by_their_column() -> None:
    from lit_sb3.cli.bench_results import Column, Table

    rate, spread = Column("rate", "steps/s", ",.0f", "-"), Column("steps", "steps: median (IQR)", ",.0f")
    table = Table([Column("case", "case"), rate, spread])
    table.rows = [
        {"case": "a", "rate": 12345.6, "steps": [2_624_000, 1_152_000, "n/r"]},
        {"case": "b", "steps": "n/r"},
    ]
    assert table.markdown().splitlines() == [
        "| case | steps/s | steps: median (IQR) |",
        "|---|---|---|",
        "| a | 12,346 | 2,624,000 (1,152,000 to n/r) |",
        "| b | - | n/r |",
    ]


def test_result_files_say_how_they_were_measured() -> None:
    from lit_sb3.cli.bench_results import Result

    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        result = Result.load(path)
        assert result.name == path.stem
        assert result.command.startswith("python benchmarks/"), path.name
        assert re.fullmatch(r"[0-9a-f]{7}.*", result.commit), path.name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", result.date), path.name
        assert "cores" in result.machine, path.name
        assert result.load_average is not None or re.search(r"load|quiet", result.conditions), path.name
        assert Result.from_json(result.to_json()) == result


def test_machine_description_names_what_a_run_depends_on() -> None:
    import platform

    import numpy as np

    from lit_sb3.cli.bench_results import cpu_model, machine_description

    description = machine_description(("numpy", "no-such-package"))
    assert description.startswith(f"{os.cpu_count()} cores")
    assert cpu_model() in description and platform.python_version() in description
    assert description.endswith(f"numpy {np.__version__}")  # packages not installed are left out


# ------------------------------------------------------------------------------------------------ references


def test_api_reference_documents_every_public_name() -> None:
    reference = (ROOT / "docs" / "reference" / "api.md").read_text()
    documented = {line.rsplit(".", 1)[-1] for line in re.findall(r"^::: (\S+)$", reference, re.MULTILINE)}
    packages = ["lit_sb3", "lit_sb3.population", "lit_sb3.vec_env", "lit_sb3.collection", "lit_sb3.engine"]
    for package in [*packages, "lit_sb3.workers"]:
        missing = set(importlib.import_module(package).__all__) - documented
        assert not missing, f"{package}: {sorted(missing)} missing from docs/reference/api.md"


def cli_hook() -> object:
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_lists_every_command_and_option() -> None:
    hook = cli_hook()
    page = hook.on_page_markdown("# CLI\n\n<!-- cli-reference -->\n")  # type: ignore[attr-defined]
    assert "<!-- cli-reference -->" not in page
    parsers: dict[str, argparse.ArgumentParser] = hook.command_parsers()  # type: ignore[attr-defined]
    assert set(parsers) == {"lit-sb3", "lit-sb3 train", "lit-sb3 evaluate", "lit-sb3 bench"}
    for command, parser in parsers.items():
        assert f"## `{command}`" in page
        for action in parser._actions:
            for option in action.option_strings:
                assert re.search(rf"(^|[\s\[,]){re.escape(option)}\b", page), f"{command} {option}"


# -------------------------------------------------------------------------------------------------- README


def test_readme_is_short_and_links_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 12_000
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link
    assert 'pip install torch==2.13.0 -e ".[plot]" && lit-sb3 train ars CartPole-v1' in readme
    assert 'pip install torch==2.13.0 -e ".[test]" && python -m pytest -q' in readme


def test_the_choice_per_task_is_the_fastest_reliable_configuration() -> None:
    from lit_sb3.cli.bench_results import Result, Table

    def study_row(configuration: str, reached: str, steps: list[object], returns: int, budget: str = "1M") -> Row:
        figures = {"reached": reached, "steps_to_threshold": steps, "final_return": returns, "budget": budget}
        return {"task": "hopper", "configuration": configuration, **figures}

    rows = [
        study_row("lit_sb3 CMAES", "1/1", [100_000, 100_000, 100_000], 3500),  # fastest, but one seed
        study_row("lit_sb3 ARS", "4/5", [900_000, 800_000, "n/r"], 3100),
        study_row("lit_sb3 ES", "3/3", [1_200_000, 1_000_000, 1_300_000], 3200),
        study_row("sb3-contrib ARS + lit_sb3 AsyncEval", "5/5", [50_000, 40_000, 60_000], 3300),  # not ours
    ]
    result = Result("study", "python benchmarks/x.py", "0000000", "2026-12-01", "2 cores", None, "", {})
    result.tables["learning_study"] = Table([], rows)
    (choice,) = render_results().choices(result).rows  # type: ignore[attr-defined]
    assert choice["choose"] == "lit_sb3 ARS" and choice["reached"] == "4/5"
    assert choice["next"] == "lit_sb3 ES (3/3, 1,200,000 steps)"


def test_a_task_no_configuration_solves_gets_the_best_policy_found() -> None:
    from lit_sb3.cli.bench_results import Result, Table

    def study_row(configuration: str, final_return: int, budget: str) -> Row:
        figures = {"reached": "0/1", "steps_to_threshold": ["n/r", "n/r", "n/r"], "final_return": final_return}
        return {"task": "walker2d", "configuration": configuration, "budget": budget, **figures}

    rows = [study_row("lit_sb3 XNES", 845, "10M"), study_row("lit_sb3 PGPE", 4057, "75M")]
    result = Result("study", "python benchmarks/x.py", "0000000", "2026-12-01", "2 cores", None, "", {})
    result.tables["learning_study"] = Table([], rows)
    (choice,) = render_results().choices(result).rows  # type: ignore[attr-defined]
    assert choice["choose"] == "lit_sb3 PGPE" and choice["final"] == "4,057 at 75M steps"
    assert choice["next"] == "lit_sb3 XNES (0/1, 845 at 10M steps)"


def test_the_side_by_side_sets_our_choice_against_each_rivals_best() -> None:
    from lit_sb3.cli.bench_results import Result, Table

    def study_row(configuration: str, reached: str, steps: object, wall: object, cpu: object) -> Row:
        figures = {"reached": reached, "steps_to_threshold": [steps, steps, steps], "final_return": 3000}
        times = {"wall_to_threshold": [wall, wall, wall], "cpu_to_threshold": [cpu, cpu, cpu], "wall_at_rate": None}
        return {"task": "hopper", "configuration": configuration, "budget": "3M", **figures, **times}

    rows = [
        study_row("lit_sb3 ARS", "4/5", 1_000_000, 100, 150),
        study_row("EvoTorch 0.6.1 SNES, GymNE 2 actors", "1/1", 2_000_000, 400, 300),
        study_row("EvoTorch 0.6.1 XNES, GymNE 2 actors", "1/1", 1_500_000, 500, 600),  # fewer steps, more time
        study_row("EvoTorch 0.6.1 PGPE + ClipUp (its MuJoCo recipe), GymNE 2 actors", "0/1", "n/r", "n/r", "n/r"),
        study_row("sb3-contrib ARS, rl-zoo's ars.yml, + its AsyncEval", "0/2", "n/r", "n/r", "n/r"),
        # Their algorithm on our evaluator is our way of running it, not theirs.
        study_row("sb3-contrib ARS, rl-zoo's ars.yml, + lit_sb3 AsyncEval", "2/2", 500_000, 50, 100),
    ]
    result = Result("study", "python benchmarks/x.py", "0000000", "2026-12-01", "2 cores", None, "", {})
    result.tables["learning_study"] = Table([], rows)
    (side_by_side,) = render_results().versus(result).rows  # type: ignore[attr-defined]
    assert side_by_side["lit_sb3"] == "ARS: 4/5, 1M steps, 100 s in the study"
    assert side_by_side["evotorch"] == "SNES: 1/1, 2M steps, 400 s in the study"
    assert side_by_side["evotorch_ratio"] == "0.25 wall in the study, 0.50 CPU in the study"
    assert side_by_side["contrib"] == "0/2, 3,000 at 3M steps"
    assert side_by_side["contrib_ratio"] == "only ours reached"
    # Their runs' lengths bound the ratio where they did not reach the threshold.
    rows[4] |= {"steps_at_least": 3_000_000, "wall_at_least": 400}
    (side_by_side,) = render_results().versus(result).rows  # type: ignore[attr-defined]
    assert side_by_side["contrib_ratio"] == "< 0.25 wall in the study (only ours reached)"
    # With training rates measured alone for both, times are the env steps at those rates.
    rows[0]["wall_at_rate"], rows[1]["wall_at_rate"] = [60, 50, 70], [300, 250, 350]
    (side_by_side,) = render_results().versus(result).rows  # type: ignore[attr-defined]
    assert side_by_side["lit_sb3"] == "ARS: 4/5, 1M steps, 60 s alone"
    assert side_by_side["evotorch_ratio"] == "0.20 alone"
    rows[4]["train_rate_alone"] = 10_000.0  # 3M steps: 300 s alone
    (side_by_side,) = render_results().versus(result).rows  # type: ignore[attr-defined]
    assert side_by_side["contrib_ratio"] == "< 0.20 alone (only ours reached)"
    # Of several configurations none of which reached it, the one that ran the shortest bounds the ratio.
    rows.append(study_row("sb3-contrib ARS, rl-zoo's ars.yml, + its AsyncEval", "0/1", "n/r", "n/r", "n/r"))
    rows[-1] |= {"configuration": "sb3-contrib ARS, n_envs 8", "steps_at_least": 1_000_000, "wall_at_least": 150}
    (side_by_side,) = render_results().versus(result).rows  # type: ignore[attr-defined]
    assert side_by_side["contrib_ratio"] == "< 0.67 wall in the study (only ours reached)"
