"""``lit-sb3 bench``: the quick case of the AsyncEval benchmark against sb3-contrib's, from a source checkout."""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
from typing import Any

import lit_sb3
from lit_sb3.cli.common import CliError, ExampleFormatter, require_module

#: The benchmark script, relative to the root of a source checkout.
BENCHMARK = pathlib.Path("benchmarks") / "asynceval_vs_sb3contrib.py"

EXAMPLES = f"""\
examples:
  lit-sb3 bench
  lit-sb3 bench --rounds 1

Runs `python {BENCHMARK} --quick` of the source checkout lit_sb3 is installed from (pip install -e .), which
needs sb3-contrib: lit_sb3's AsyncEval and sb3-contrib's on the same environments, policies, populations and
seeds, two workers, about a minute here. Prints the throughput table and the other measures.
"""


def add_parser(commands: Any) -> None:
    """:param commands: The subparsers of the ``lit-sb3`` parser."""
    parser = commands.add_parser(
        "bench",
        help="benchmark AsyncEval against sb3-contrib's (quick case)",
        description="Benchmark lit_sb3's AsyncEval against sb3-contrib's: the quick case.",
        epilog=EXAMPLES,
        formatter_class=ExampleFormatter,
    )
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds per case (default: the script's, 3)")
    parser.set_defaults(run=run_bench)


def benchmark_script() -> pathlib.Path:
    """
    :return: The benchmark script of the source checkout the package is installed from.
    :raises CliError: if there is none (an install from a wheel).
    """
    root = pathlib.Path(lit_sb3.__file__).resolve().parent.parent
    script = root / BENCHMARK
    if not script.is_file():
        raise CliError(
            f"{BENCHMARK} not found in {root}: lit-sb3 bench runs it from a source checkout "
            "(clone the repository and pip install -e . there)"
        )
    return script


def run_bench(args: argparse.Namespace) -> None:
    """
    Run the benchmark script's quick case; its tables go to standard output.

    :param args: Parsed ``bench`` arguments.
    """
    if args.rounds is not None and args.rounds < 1:
        raise CliError("--rounds must be at least 1")
    script = benchmark_script()
    require_module("sb3_contrib", "lit-sb3 bench", "sb3-contrib")
    command = [sys.executable, str(script), "--quick"]
    if args.rounds is not None:
        command += ["--rounds", str(args.rounds)]
    completed = subprocess.run(command, check=False)
    if completed.returncode != 0:
        raise CliError(f"the benchmark failed (exit status {completed.returncode})")
