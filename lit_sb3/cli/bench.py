"""``lit-sb3 bench``: the quick case of the AsyncEval benchmark against sb3-contrib's."""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from lit_sb3.cli.common import CliError, ExampleFormatter, check_output_folder, require_module

EXAMPLES = """\
examples:
  lit-sb3 bench
  lit-sb3 bench --rounds 1
  lit-sb3 bench --results runs/bench

lit_sb3's AsyncEval and sb3-contrib's on the same environments, policies, populations and seeds, two workers,
interleaved rounds, medians (about a minute here). Prints the throughput table and the other measures. Needs
sb3-contrib and psutil: pip install "lit_sb3[bench]".
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
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds per case (default 3)")
    parser.add_argument(
        "--results", default=None, metavar="DIR", help="also write the tables to DIR/asynceval_vs_sb3contrib.json"
    )
    parser.set_defaults(run=run_bench)


def run_bench(args: argparse.Namespace) -> None:
    """
    Run the benchmark's quick case; its tables go to standard output.

    :param args: Parsed ``bench`` arguments.
    """
    if args.rounds is not None and args.rounds < 1:
        raise CliError("--rounds must be at least 1")
    require_module("sb3_contrib", "lit-sb3 bench", '"lit_sb3[bench]"')
    require_module("psutil", "lit-sb3 bench", '"lit_sb3[bench]"')
    if args.results is not None:
        check_output_folder(pathlib.Path(args.results), "--results")
    from lit_sb3.cli.asynceval_bench import measure
    from lit_sb3.cli.bench_results import LoadSampler, new_result, save_result

    load = LoadSampler()
    tables = measure(quick=True, rounds=args.rounds)
    for table in tables.values():
        print("\n" + table.markdown())
    if args.results is not None:
        path = save_result(new_result("asynceval_vs_sb3contrib", tables, load, packages=["sb3-contrib"]), args.results)
        print(f"\nwrote {path}")
