"""Benchmark results as data: one JSON file per benchmark, with the command, commit, machine and load it ran on.

A result file holds tables of typed figures (numbers stay numbers) and, per column, how a cell is written, so the
tables of the documentation are rendered from the files (``benchmarks/render_results.py``) and never typed by hand.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

#: Where the benchmark scripts of a source checkout keep their results.
RESULTS_FOLDER = pathlib.Path("benchmarks") / "results"


@dataclass
class Column:
    """
    One column of a result table.

    :param key: The key of the figure in each row.
    :param header: The column's heading.
    :param format: A format spec for numbers (``",.0f"``, ``".2f"``); strings are written as they are, and a list
        ``[median, q1, q3]`` as ``median (q1 to q3)``.
    :param missing: What a row without this figure (``None``) shows.
    """

    key: str
    header: str
    format: str = ""
    missing: str = ""

    def cell(self, row: dict[str, Any]) -> str:
        """:return: The cell of ``row`` in this column."""
        value = row.get(self.key)
        if value is None:
            return self.missing
        if isinstance(value, list):
            median, low, high = (self.number(part) for part in value)
            return f"{median} ({low} to {high})"
        return self.number(value)

    def number(self, value: float | str) -> str:
        """:return: ``value`` in this column's format (a string as it is)."""
        return value if isinstance(value, str) else format(value, self.format)


@dataclass
class Table:
    """A table of figures: its columns and one dict of figures per row."""

    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def markdown(self) -> str:
        """:return: The table in Markdown, one line per row."""
        lines = ["| " + " | ".join(column.header for column in self.columns) + " |"]
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        lines += ["| " + " | ".join(column.cell(row) for column in self.columns) + " |" for row in self.rows]
        return "\n".join(lines)


@dataclass
class Result:
    """
    One run of a benchmark.

    :param name: The file's name without ``.json``.
    :param command: The command that produced it.
    :param commit: The commit of the code measured.
    :param date: The day of the run (ISO format).
    :param machine: The machine and the versions that matter.
    :param load_average: The one-minute load average over the run (least and most sampled), None if not recorded.
    :param conditions: What else the reader must know about the run (the load, what ran beside it).
    :param tables: The tables by name.
    """

    name: str
    command: str
    commit: str
    date: str
    machine: str
    load_average: list[float] | None
    conditions: str
    tables: dict[str, Table]

    def to_json(self) -> str:
        """:return: The result as indented JSON."""
        return json.dumps(asdict(self), indent=1, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Result:
        """:return: The result a file of :meth:`to_json` holds."""
        data = json.loads(text)
        tables = {
            name: Table([Column(**column) for column in table["columns"]], table["rows"])
            for name, table in data.pop("tables").items()
        }
        return cls(**data, tables=tables)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Result:
        """:return: The result stored in ``path``."""
        return cls.from_json(pathlib.Path(path).read_text())


class LoadSampler:
    """Samples the one-minute load average; call :meth:`sample` between the parts of a benchmark."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.sample()

    def sample(self) -> None:
        """Record the current one-minute load average."""
        self.samples.append(round(os.getloadavg()[0], 1))

    def span(self) -> list[float]:
        """:return: The least and the most load average sampled."""
        self.sample()
        return [min(self.samples), max(self.samples)]


def current_commit() -> str:
    """:return: The commit of the source checkout lit_sb3 runs from, or ``"unknown"`` (an installed wheel)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        completed = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return completed.stdout.strip()


#: The packages every result names the versions of.
CORE_PACKAGES = ("torch", "stable-baselines3", "gymnasium")


def cpu_model() -> str:
    """:return: The processor's model name (``/proc/cpuinfo``'s, else ``platform.processor()``), or ``""``."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_description(packages: Sequence[str] = CORE_PACKAGES) -> str:
    """
    :return: The CPU count and model, memory, Python and the versions of ``packages`` (the installed ones): what
        a result's exact numbers depend on (the same seed can take another path on another CPU or version).
    """
    memory = ""
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        memory = f", {os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB"
    versions = []
    for package in packages:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    python = f"Python {platform.python_version()}"
    hardware = " ".join(filter(None, [platform.machine(), cpu_model()]))
    return f"{os.cpu_count()} cores{memory}, {hardware}; " + ", ".join([python, *versions])


def command_line() -> str:
    """:return: The command line this process was started with, as a user would type it."""
    program, *arguments = sys.argv
    if pathlib.Path(program).name == "__main__.py":  # python -m lit_sb3.cli: the lit-sb3 command
        return shlex.join(["lit-sb3", *arguments])
    if program.endswith(".py"):
        return shlex.join(["python", os.path.relpath(program), *arguments])
    return shlex.join([pathlib.Path(program).name, *arguments])


def new_result(
    name: str, tables: dict[str, Table], load: LoadSampler, conditions: str = "", packages: Sequence[str] = ()
) -> Result:
    """
    :param name: The benchmark's name (the result file's stem).
    :param tables: Its tables.
    :param load: The sampler started with the benchmark.
    :param conditions: Anything the reader must know about the run.
    :param packages: Packages whose versions matter besides torch, stable-baselines3 and gymnasium.
    :return: The result of a run that ends now.
    """
    return Result(
        name=name,
        command=command_line(),
        commit=current_commit(),
        date=datetime.date.today().isoformat(),
        machine=machine_description((*CORE_PACKAGES, *packages)),
        load_average=load.span(),
        conditions=conditions,
        tables=tables,
    )


def save_result(result: Result, folder: str | os.PathLike[str] = RESULTS_FOLDER) -> pathlib.Path:
    """
    Write ``result`` to ``folder/<name>.json``.

    :return: The path written.
    """
    path = pathlib.Path(folder) / f"{result.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json())
    return path
