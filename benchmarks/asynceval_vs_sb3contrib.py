"""lit_sb3's AsyncEval against sb3-contrib's, side by side in one run (the core is ``lit_sb3.cli.asynceval_bench``).

Both evaluate the same population of the same policy on the same ``envs_fn`` with the same seeds, in interleaved
rounds; the tables give medians. ``limit`` is ``workers x`` the single-process rate of the same VecEnv stepped with
precomputed random actions, measured in the same run between rounds. A full run writes
``benchmarks/results/asynceval_vs_sb3contrib.json``; ``python benchmarks/render_results.py`` puts it in the docs.

    python benchmarks/asynceval_vs_sb3contrib.py            # every case (about 3 minutes on 2 cores)
    python benchmarks/asynceval_vs_sb3contrib.py --quick    # fewer rounds, smaller cases (what lit-sb3 bench runs)
"""

from __future__ import annotations

import argparse

from lit_sb3.cli.asynceval_bench import default_rounds, measure
from lit_sb3.cli.bench_results import RESULTS_FOLDER, LoadSampler, new_result, save_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, no MuJoCo case")
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds per case (default 7, quick 3)")
    parser.add_argument("--conditions", default="", help="what else the result file should say (what ran beside it)")
    parser.add_argument(
        "--results", default=None, help=f"folder of the result file (default: {RESULTS_FOLDER}; quick runs: none)"
    )
    args = parser.parse_args()
    load = LoadSampler()
    rounds = args.rounds or default_rounds(args.quick)
    tables = measure(args.quick, rounds)
    for table in tables.values():
        print("\n" + table.markdown())
    if args.results or not args.quick:
        path = save_result(
            new_result(
                "asynceval_vs_sb3contrib",
                tables,
                load,
                f"interleaved rounds, medians of {rounds}. {args.conditions}".strip(),
                packages=["sb3-contrib"],
            ),
            args.results or RESULTS_FOLDER,
        )
        print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
