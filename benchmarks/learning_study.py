"""Learning study: many seeds per configuration, one run per process, every run appended to a JSON-lines log.

Each run trains one (task, configuration, seed) on 2 workers (or, as rl-zoo runs sb3-contrib's ARS with its
``n_envs: 1``, in its own process: ``contrib-ars-zoo-in-process``) until the task's threshold or its step budget and
logs its evaluation curve: env steps, training wall time, mean return of 10 deterministic episodes of the centre
policy, and training CPU-seconds. The centre is evaluated at round starts (at least ``eval_interval`` env steps
apart) on the same 10 reset seeds every time; neither its wall time nor its CPU time is counted. A run also logs the
machine's load average before and after (the machine is shared: wall times are noisy, steps to threshold are not).
A run goes on to at least the task's fixed budget, so the return at that budget is known for every seed. A seed
run again (a queue line with a larger budget: it goes on from the last run's checkpoint, or, our runs being
deterministic, repeats the old run up to its budget) replaces its earlier record in the report and the figures.
Deterministic means on one machine with one set of packages: a record names both (``machine``: CPU, Python and the
versions of the packages that decide a run's path). Elsewhere a seed takes another path: Swimmer SNES
(``snes-stdev-1``) seed 1 reached the threshold at 144k steps in its study record (commit 4e58036) and at 168k when
run again on another machine at the same commit.

Env steps count every step of every candidate's episode (ARS's ``num_timesteps``); centre evaluations are not
counted. CPU-seconds are those of the run's process tree, read with ``psutil``: the main process plus every process
below it (worker pools, sb3-contrib's workers, Ray's actors and the Ray services ``ray.init`` starts), each counted
up to the last time the study saw it alive (at each evaluation); the main process's CPU time during evaluations is
taken off. Wall and CPU clocks start after the worker pool (or Ray's actors) is up, when training starts.

Tasks and thresholds are the ARS paper's (Mania et al. 2018, table 1); the ARS settings per task are the paper's
(its table 9, and github:modestyachts/ARS ``code/ars.py`` for the alive-bonus shift).

EvoTorch configurations (``evotorch-*``) run EvoTorch's own ``GymNE`` with 2 Ray actors (``num_actors=2``) and a
linear policy with bias (``"Linear(obs_length, act_length)"``). They need::

    pip install torch==2.13.0 evotorch==0.6.1   # torch first: a bare torch pulls a CUDA build

EvoTorch's counter ``GymNE.interaction_count`` (``status["total_interaction_count"]``) counts every env step of
every solution's episode during training evaluations (those that update the observation statistics), summed over
the actors: the study's env steps. Its centre (``status["center"]``) is evaluated as ours is: the policy
``problem.to_policy(center)`` (EvoTorch's observation normalisation and action clipping), 10 episodes on the
study's reset seeds, in the main process, with raw rewards (no alive-bonus decrease). EvoTorch runs are not
reproducible from their seed (Ray actors seed their environments themselves).

Subcommands::

    python benchmarks/learning_study.py run --task halfcheetah --config ars --seed 0 --out runs.jsonl
    python benchmarks/learning_study.py queue jobs.txt --out runs.jsonl   # runs "task config seed [budget]" lines
    python benchmarks/learning_study.py report runs.jsonl                 # the table (markdown; --results: a file)
    python benchmarks/learning_study.py figures runs.jsonl figures/       # learning curves: per task, and suite.png
    python benchmarks/learning_study.py update-cost --task humanoid --config xnes  # ask/tell alone, no env steps
    python benchmarks/learning_study.py throughput --task hopper --config ars --steps 1000000 --out rates.jsonl
    python benchmarks/learning_study.py env-rate --task hopper --out env_rates.jsonl  # env.step alone, one core

``throughput`` measures a configuration's training rate alone (``report --throughput`` divides each seed's env steps
to the threshold by the median of its measurements); ``env-rate`` the environment's own, with no policy, no
normalisation and no workers: the most env steps a second any library gets out of one core.

``queue`` takes the first line of the jobs file off it and runs it, until the file is empty, so the queue can be
edited while it runs. The job being run is kept in ``JOBS.running``; a queue started later puts the jobs of a queue
that was killed back at the head of the jobs file. A run that fails is appended to ``JOBS.failed``. Every run saves a
checkpoint (its model or EvoTorch searcher, curve and clocks) between two rounds every ``CHECKPOINT_INTERVAL``
seconds, in ``OUT.checkpoints/``, and a run that finds its checkpoint goes on from it (its record counts the
``resumes``): a run outlives the processes that ran it. The checkpoint of a finished run is kept
(``OUT.checkpoints/TASK-CONFIG-SEED``), so a run of the seed with a larger budget goes on from where the last one
ended (EvoTorch's PGPE, SNES and XNES: from before its last generation) instead of repeating it. ``Checkpoint`` says
what a resumed run repeats exactly.

The modules beside this command: ``study_setup`` (the tasks and configurations: ``CONFIGS`` and
``EVOTORCH_CONFIGS``, the ``--config`` names), ``study_run`` (one run, its clocks and checkpoints, the rates alone),
``study_queue`` (the jobs file) and ``study_report`` (the table and figures).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from study_queue import queue
from study_report import figures, report
from study_run import append_json_line, env_rate, run, throughput, update_cost
from study_setup import CONFIGS, EVOTORCH_CONFIGS, TASKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("--task", choices=list(TASKS), required=True)
    run_parser.add_argument("--config", choices=[*CONFIGS, *EVOTORCH_CONFIGS], required=True)
    run_parser.add_argument("--seed", type=int, required=True)
    run_parser.add_argument("--budget", type=int, help="env steps at most (default: the task's)")
    run_parser.add_argument("--out", required=True, help="JSON-lines log the run is appended to")
    run_parser.add_argument(
        "--checkpoints", help="folder of checkpoints of runs that go on after a kill (default: OUT.checkpoints)"
    )
    queue_parser = commands.add_parser("queue")
    queue_parser.add_argument("jobs")
    queue_parser.add_argument("--out", required=True)
    throughput_parser = commands.add_parser("throughput")
    throughput_parser.add_argument("--task", choices=list(TASKS), required=True)
    throughput_parser.add_argument("--config", choices=[*CONFIGS, *EVOTORCH_CONFIGS], required=True)
    throughput_parser.add_argument("--steps", type=int, required=True)
    throughput_parser.add_argument("--out", required=True)
    env_rate_parser = commands.add_parser("env-rate")
    env_rate_parser.add_argument("--task", choices=list(TASKS), required=True)
    env_rate_parser.add_argument("--steps", type=int, default=100_000)
    env_rate_parser.add_argument("--out", help="JSON-lines log the measurement is appended to too")
    report_parser = commands.add_parser("report")
    report_parser.add_argument("runs")
    report_parser.add_argument(
        "--throughput",
        help="JSON-lines log of throughput runs (a configuration's rate: the median of its runs at its last commit)",
    )
    report_parser.add_argument("--results", help="write the table as a result file into this folder too")
    report_parser.add_argument("--name", default="learning_study", help="the result file's name (without .json)")
    cost_parser = commands.add_parser("update-cost")
    cost_parser.add_argument("--task", choices=list(TASKS), required=True)
    cost_parser.add_argument("--config", choices=list(CONFIGS), required=True)
    cost_parser.add_argument("--rounds", type=int, default=3)
    figures_parser = commands.add_parser("figures")
    figures_parser.add_argument("runs")
    figures_parser.add_argument("folder", help="where the PNGs are written (created if missing)")
    figures_parser.add_argument(
        "--throughput", default=None, help="the rates measured alone: the suite figure's rivals are the report's"
    )
    args = parser.parse_args()
    if args.command == "run":
        checkpoints = Path(args.checkpoints or f"{args.out}.checkpoints")
        record = run(args.task, args.config, args.seed, args.budget, checkpoints)
        append_json_line(args.out, dataclasses.asdict(record))
        print(
            f"{record.task} {record.config} seed {record.seed}: threshold at {record.steps_to_threshold} steps, "
            f"{record.time_to_threshold} s, {record.cpu_to_threshold} CPU-s; final {record.curve[-1]}; "
            f"load {record.load_before}-{record.load_after}",
            flush=True,
        )
    elif args.command == "throughput":
        measured = throughput(args.task, args.config, args.steps)
        append_json_line(args.out, measured)
        print(measured, flush=True)
    elif args.command == "env-rate":
        measured = env_rate(args.task, args.steps)
        if args.out is not None:
            append_json_line(args.out, measured)
        print(measured, flush=True)
    elif args.command == "queue":
        queue(args.jobs, args.out)
    elif args.command == "figures":
        figures(args.runs, args.folder, args.throughput)
    elif args.command == "update-cost":
        print(update_cost(args.task, args.config, args.rounds), flush=True)
    else:
        report(args.runs, args.throughput, args.results, args.name)


if __name__ == "__main__":
    main()
