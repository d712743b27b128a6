"""Render the benchmark tables of the docs and the README's headline figures from ``benchmarks/results/*.json``.

A page asks for a result with markers; everything between a marker and ``<!-- end result -->`` is rewritten:

    <!-- result: engine -->              how the run was made: command, commit, date, machine, load
    <!-- result: engine/engine -->       a table of the run
    <!-- result: learning_study/choose -->  a table computed from the run's tables (``DERIVED``)
    <!-- result: headlines -->           the README's headline lines, computed from every result

The figures of the docs come from the committed notebooks the same way (``FIGURES``: the first image a notebook
shows, written to ``docs/images/``).

    python benchmarks/render_results.py           # rewrite the pages and the figures
    python benchmarks/render_results.py --check   # exit 1 if a page or a figure differs from its source
"""

from __future__ import annotations

import argparse
import base64
import json
import pathlib
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

from lit_sb3.cli.bench_results import Column, Result, Table

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: The case of the gradient-agent and engine benchmarks whose environment sleeps 2 ms a step.
SLEEPY = "PPO sleepy CartPole (2 ms/step), 8 envs"
#: The gradient-agent benchmark's case of plain CartPole.
CARTPOLE = "PPO CartPole-v1, 8 envs"
#: The two kinds of local workers of the gradient agents.
KINDS = ("threads", "processes")
#: What names the AsyncEval case in which sb3-contrib steps other environments than ours.
VS_BEST = "vs sb3-contrib's best"
MARKER = re.compile(r"(<!-- result: (?P<what>[\w/]+) -->\n)(?P<body>.*?)(<!-- end result -->)", re.DOTALL)


#: Figures of the docs, by path, and the notebook whose first image each one is.
FIGURES = {ROOT / "docs" / "images" / "optimiser_comparison.png": ROOT / "notebooks" / "optimiser_comparison.ipynb"}


def notebook_figure(notebook: pathlib.Path) -> bytes:
    """:return: The first PNG among the outputs of ``notebook``."""
    for cell in json.loads(notebook.read_text())["cells"]:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                return base64.b64decode(output["data"]["image/png"])
    raise ValueError(f"{notebook} shows no figure")


def stale_figures() -> list[pathlib.Path]:
    """:return: The figures that differ from their notebook's."""
    return [
        path
        for path, notebook in FIGURES.items()
        if not path.is_file() or path.read_bytes() != notebook_figure(notebook)
    ]


def pages() -> list[pathlib.Path]:
    """:return: The README and every page of the docs."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def load_results() -> dict[str, Result]:
    """:return: Every committed result, by name."""
    return {path.stem: Result.load(path) for path in sorted(RESULTS.glob("*.json"))}


def provenance(result: Result) -> str:
    """:return: How a run was made, as a paragraph."""
    if result.load_average is None:
        load = "load average not recorded"
    else:
        low, high = result.load_average
        load = f"load average {low:g}-{high:g}"
    lines = [
        f"Command: `{result.command}`. Commit {result.commit}, {result.date}; {result.machine}; {load}.",
    ]
    if result.conditions:
        lines.append(result.conditions)
    return "\n".join(lines)


def row(result: Result, table: str, **match: str) -> dict[str, Any]:
    """:return: The first row of ``table`` whose figures equal ``match``."""
    for candidate in result.tables[table].rows:
        if all(candidate.get(key) == value for key, value in match.items()):
            return candidate
    raise KeyError(f"{result.name}/{table}: no row with {match}")


def headline_asynceval(result: Result) -> str:
    rows = result.tables["throughput"].rows
    # The case that gives sb3-contrib other environments (its best CartPole VecEnv) is quoted on its own.
    same_envs = [row["ratio"] for row in rows if VS_BEST not in row["case"]]
    other_envs = [row["ratio"] for row in rows if VS_BEST in row["case"]]
    return (
        f"- **AsyncEval**: {min(same_envs):.1f}x to {max(same_envs):.1f}x the env steps per second of sb3-contrib's "
        f"`AsyncEval`, same envs, populations, seeds and 2 workers ({len(same_envs)} cases, {result.date})"
        + "".join(f"; {ratio:.1f}x with a 64-env vector CartPole against its fastest VecEnv" for ratio in other_envs)
        + "."
    )


def headline_gradient(result: Result) -> str:
    def ratios(case: str, column: str) -> str:
        rows = [row(result, "gradient_agents", case=case, configuration=f"lit_sb3 {kind}") for kind in KINDS]
        return "/".join(f"{candidate[column]:.2f}x" for candidate in rows)

    return (
        f"- **Gradient agents**, default arguments, worker threads/processes: PPO on 8 CartPoles "
        f"{ratios(CARTPOLE, 'ratio')} plain SB3's `DummyVecEnv` ({ratios(CARTPOLE, 'ratio_one_thread')}, its torch "
        f"at one thread); on a CartPole sleeping 2 ms a step {ratios(SLEEPY, 'ratio')} `SubprocVecEnv` "
        f"({ratios(SLEEPY, 'ratio_one_thread')}) ({result.date})."
    )


def headline_engine(result: Result) -> str:
    default = row(result, "engine", case=SLEEPY, configuration="AsyncRLEngine processes, default workers")
    per_env = row(result, "engine", case=SLEEPY, configuration="AsyncRLEngine processes")
    return (
        f"- **AsyncRLEngine**: on the 2 ms CartPole {default['ratio_learn']:.2f}x PPO's own `learn()` on "
        f"`SubprocVecEnv` at default arguments, {per_env['ratio_learn']:.2f}x with a worker process per env "
        f"({per_env['ratio_injected']:.2f}x the injected agent with the same workers) ({result.date})."
    )


def headline_learning(result: Result) -> str:
    cmaes = row(result, "learning_study", task="halfcheetah", configuration="lit_sb3 CMAES")
    ars = row(result, "learning_study", task="halfcheetah", configuration="lit_sb3 ARS")
    return (
        f"- **Learning**: HalfCheetah-v5 to 3430 in a median {cmaes['steps_to_threshold'][0] / 1e6:.1f}M env steps "
        f"with CMAES ({cmaes['reached']} seeds) and {ars['steps_to_threshold'][0] / 1e6:.1f}M with ARS V2-t "
        f"({ars['reached']}) ({result.date})."
    )


def headline_mujoco(result: Result) -> str:
    chosen = choices(result).rows
    reached = ", ".join(
        f"{choice['task']} {choice['reached']} ({choice['choose'].split()[1].rstrip(',')})" for choice in chosen
    )
    humanoid = next((choice for choice in chosen if choice["task"] == "humanoid"), None)
    cpu = ""
    if humanoid is not None:
        figures = row(result, "learning_study", task="humanoid", configuration=humanoid["choose"])
        if (minutes := steps_or_inf(figures["cpu_to_threshold"]) / 60) != float("inf"):
            cpu = f"; Humanoid in {minutes:.0f} CPU-minutes"
    es = row(result, "learning_study", task="halfcheetah", configuration="lit_sb3 ES")
    cem = row(result, "learning_study", task="halfcheetah", configuration="lit_sb3 CEM")
    baselines = (
        f"; ES on HalfCheetah {es['reached']} (median {steps_or_inf(es['steps_to_threshold']) / 1e6:.1f}M steps), "
        f"CEM {cem['reached']}"
    )
    return f"- **MuJoCo**, seeds at the ARS paper's thresholds: {reached}{cpu}{baselines} ({result.date})."


def headline_ray(result: Result) -> str:
    cheetah = row(result, "throughput", case="HalfCheetah-v5, n_envs=1, MlpPolicy [64, 64], pop 16")
    return (
        f"- **Ray**: the same results as local workers, bit for bit; HalfCheetah-v5 on 2 Ray actors at "
        f"{cheetah['ratio']:.2f}x 2 local worker processes ({result.date})."
    )


def steps_or_inf(figure: Any) -> float:
    """:return: The median of a ``[median, q1, q3]`` figure, infinite when not reached or missing."""
    median = figure[0] if isinstance(figure, list) else figure
    return float(median) if isinstance(median, (int, float)) else float("inf")


def time_to_threshold(candidate: dict[str, Any]) -> float:
    """:return: A configuration's median wall time to the threshold: its env steps at the training rate measured
    alone where there is one, else in the study; infinite when not reached."""
    alone = candidate.get("wall_at_rate") is not None
    return steps_or_inf(candidate["wall_at_rate" if alone else "wall_to_threshold"])


def rank(candidate: dict[str, Any], by_time: bool = False) -> tuple[bool, float, float, float]:
    """
    :param candidate: A row of a learning study's table.
    :param by_time: Whether to rank by the wall time to the threshold (:func:`time_to_threshold`) instead of the
        env steps.
    :return: Its sort key: the reliable configurations first (at least 3 seeds run and 4 in 5 of them at the
        threshold), then by the median env steps (or wall time) to the threshold, the share of seeds at the threshold
        and the median return at the end of their runs (a configuration run longer may come first: it is the best
        policy found).
    """
    reached, seeds = (int(part) for part in candidate["reached"].split("/"))
    reliable = seeds >= 3 and reached >= 0.8 * seeds
    cost = time_to_threshold(candidate) if by_time else steps_or_inf(candidate["steps_to_threshold"])
    return not reliable, cost, -reached / seeds, -candidate["final_return"]


def ending(candidate: dict[str, Any]) -> str:
    """:return: The median return at the end of a configuration's runs, and their budget."""
    return f"{candidate['final_return']:,} at {candidate['budget']} steps"


def families(rows: list[dict[str, Any]], prefix: str, by_time: bool = False) -> dict[str, list[dict[str, Any]]]:
    """
    :param rows: The rows of a learning study's table.
    :param by_time: Whether to rank by wall time (see :func:`rank`).
    :return: Those whose configuration starts with ``prefix``, by task, best first (:func:`rank`).
    """
    by_task: dict[str, list[dict[str, Any]]] = {}
    for candidate in rows:
        if candidate["configuration"].startswith(prefix):
            by_task.setdefault(candidate["task"], []).append(candidate)
    return {task: sorted(candidates, key=lambda row: rank(row, by_time)) for task, candidates in by_task.items()}


def choices(result: Result) -> Table:
    """
    :return: Per task of a learning study, lit_sb3's configuration that comes first by :func:`rank`, and the next one.
    """
    columns = [Column("task", "task"), Column("choose", "choose"), Column("reached", "seeds at threshold")]
    columns += [Column("steps", "env steps to threshold: median (IQR)", ",.0f")]
    columns += [Column("final", "return at the end of the runs (median)"), Column("next", "next best")]
    table = Table(columns)
    for task, (best, *others) in families(result.tables["learning_study"].rows, "lit_sb3").items():
        following = ""
        if others:
            median = steps_or_inf(others[0]["steps_to_threshold"])
            at = f"{median:,.0f} steps" if median != float("inf") else ending(others[0])
            following = f"{others[0]['configuration']} ({others[0]['reached']}, {at})"
        row = {"task": task, "choose": best["configuration"], "reached": best["reached"]}
        table.rows.append({**row, "steps": best["steps_to_threshold"], "final": ending(best), "next": following})
    return table


#: The rivals of a learning study: the start of their configurations' labels, and their column's title.
RIVALS = {
    "evotorch": ("EvoTorch", "EvoTorch's best"),
    "contrib": ("sb3-contrib ARS", "sb3-contrib's ARS at rl-zoo's settings"),
}


def compared_configurations(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """
    :param rows: The rows of a learning study's table.
    :return: lit_sb3's configurations (key ``"lit_sb3"``, by :func:`rank`) and each rival's on its own code (by the
        keys of :data:`RIVALS`, ranked with wall time: a rival's algorithm on lit_sb3's AsyncEval is lit_sb3's way of
        running it), by task, best first.
    """
    their_own = [candidate for candidate in rows if "lit_sb3" not in candidate["configuration"]]
    rivals = {key: families(their_own, prefix, by_time=True) for key, (prefix, _) in RIVALS.items()}
    return {"lit_sb3": families(rows, "lit_sb3"), **rivals}


def versus(result: Result) -> Table:
    """
    :return: Per task of a learning study, lit_sb3's choice (:func:`choices`) beside each rival's fastest
        configuration on its own code (:func:`compared_configurations`): seeds at the threshold, median env steps and
        wall time to it (or the median return at the end of the runs), and the ratios of lit_sb3's median time to
        the threshold to theirs (see :func:`time_ratios`).
    """
    columns = [Column("task", "task"), Column("lit_sb3", "lit_sb3's choice")]
    for key, (name, title) in RIVALS.items():
        columns += [Column(key, title), Column(f"{key}_ratio", f"/ {name.split()[0]}: time to threshold")]
    table = Table(columns)
    chosen = compared_configurations(result.tables["learning_study"].rows)
    for task, (ours, *_) in chosen["lit_sb3"].items():
        row = {"task": task, "lit_sb3": summary(ours, named=True)}
        for key in RIVALS:
            theirs = chosen[key].get(task, [])
            row[key] = summary(theirs[0], named=key != "contrib") if theirs else "none finished"
            row[f"{key}_ratio"] = time_ratios(ours, theirs) if theirs else "-"
        table.rows.append(row)
    return table


def summary(candidate: dict[str, Any], named: bool) -> str:
    """
    :param named: Whether to start with the configuration's short name.
    :return: Seeds at the threshold and median steps and wall time to it (at the training rate measured alone where
        there is one, else in the study), or the median return at the end.
    """
    name = re.sub(r"^(lit_sb3|EvoTorch [\d.]+) | \([^)]*\)|, GymNE 2 actors", "", candidate["configuration"])
    steps = steps_or_inf(candidate["steps_to_threshold"])
    reached = f"{candidate['reached']}, {ending(candidate)}"
    if steps != float("inf"):
        alone = candidate.get("wall_at_rate") is not None
        reached = (
            f"{candidate['reached']}, {steps / 1e6:.3g}M steps, {time_to_threshold(candidate):,.0f} s"
            f"{' alone' if alone else ' in the study'}"
        )
    return f"{name}: {reached}" if named else reached


#: The clocks of a learning study's runs, by their column.
STUDY_CLOCKS = {"wall_to_threshold": "wall in the study", "cpu_to_threshold": "CPU in the study"}


def time_ratios(ours: dict[str, Any], candidates: list[dict[str, Any]]) -> str:
    """
    :param candidates: A rival's configurations for the task, best first.
    :return: Our median wall time to the threshold over their best's at the training rates measured alone where both
        have one, else on the study's clocks (wall time and CPU-seconds, beside other work); "-" where ours is not
        reached; a bound where theirs is not (:func:`ratio_bound`).
    """
    if steps_or_inf(ours["steps_to_threshold"]) == float("inf"):
        return "-"
    theirs = candidates[0]
    if steps_or_inf(theirs["steps_to_threshold"]) == float("inf"):
        return ratio_bound(ours, candidates)
    ratios = {}
    for column in ("wall_at_rate", *STUDY_CLOCKS):
        mine, other = steps_or_inf(ours.get(column)), steps_or_inf(theirs.get(column))
        if mine != float("inf") and other != float("inf"):
            ratios[column] = f"{mine / other:.2f}"
    if "wall_at_rate" in ratios:
        return f"{ratios['wall_at_rate']} alone"
    return ", ".join(f"{ratios[column]} {clock}" for column, clock in STUDY_CLOCKS.items() if column in ratios)


def ratio_bound(ours: dict[str, Any], candidates: list[dict[str, Any]]) -> str:
    """
    :param candidates: A rival's configurations for the task, none with its median at the threshold.
    :return: A bound of the ratio: the largest of our median wall time to the threshold over the median of a
        configuration's runs' times to the threshold or to their end (at the training rates measured alone where
        both have one, else in the study); "only ours reached" where a row has no such median.
    """
    bounds = []
    for theirs in candidates:
        if theirs.get("steps_at_least") is None:
            return "only ours reached"
        if ours.get("wall_at_rate") is not None and theirs.get("train_rate_alone") is not None:
            their_time = theirs["steps_at_least"] / theirs["train_rate_alone"]
            bounds.append((steps_or_inf(ours["wall_at_rate"]) / their_time, "alone"))
        else:
            bounds.append((steps_or_inf(ours["wall_to_threshold"]) / theirs["wall_at_least"], "wall in the study"))
    bound, clock = max(bounds)
    return f"< {bound:.2f} {clock} (only ours reached)"


#: Tables computed from a result's tables, by the name a marker gives them.
DERIVED: dict[str, Callable[[Result], Table]] = {"choose": choices, "versus": versus}

HEADLINES: dict[str, Callable[[Result], str]] = {
    "asynceval_vs_sb3contrib": headline_asynceval,
    "gradient_agents": headline_gradient,
    "engine": headline_engine,
    "learning_study": headline_learning,
    "learning_study_mujoco": headline_mujoco,
    "ray_backend": headline_ray,
}


def render_block(what: str, results: dict[str, Result]) -> str:
    """:return: What belongs between the marker ``what`` and its end."""
    if what == "headlines":
        lines = [headline(results[name]) for name, headline in HEADLINES.items()]
        return "\n".join(lines) + "\n"
    name, _, table = what.partition("/")
    if name not in results:
        raise KeyError(f"no result file {name}.json in {RESULTS}")
    result = results[name]
    if not table:
        return provenance(result) + "\n"
    if table in DERIVED:
        return DERIVED[table](result).markdown() + "\n"
    if table not in result.tables:
        raise KeyError(f"{name}.json has no table {table!r} (it has {', '.join(result.tables)})")
    return result.tables[table].markdown() + "\n"


def render_page(text: str, results: dict[str, Result]) -> str:
    """:return: The page with every marked block rendered from ``results``."""
    return MARKER.sub(
        lambda match: match.group(1) + "\n" + render_block(match.group("what"), results) + "\n" + match.group(4),
        text,
    )


def stale_pages(paths: Iterable[pathlib.Path], results: dict[str, Result]) -> list[pathlib.Path]:
    """:return: The pages whose marked blocks differ from what ``results`` give."""
    return [path for path in paths if render_page(path.read_text(), results) != path.read_text()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the pages are up to date")
    args = parser.parse_args()
    results = load_results()
    if args.check:
        stale = stale_pages(pages(), results) + stale_figures()
        for path in stale:
            print(f"{path.relative_to(ROOT)} differs from its source: run python {sys.argv[0]}")
        raise SystemExit(1 if stale else 0)
    for path in stale_figures():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(notebook_figure(FIGURES[path]))
        print(f"rendered {path.relative_to(ROOT)}")
    for path in pages():
        text = path.read_text()
        rendered = render_page(text, results)
        if rendered != text:
            path.write_text(rendered)
            print(f"rendered {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
