"""The ``lit-sb3`` command: ``train``, ``evaluate`` and ``bench``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from lit_sb3.cli import bench, evaluate, train
from lit_sb3.cli.common import CliError, ExampleFormatter, OneLineParser

EXAMPLES = """\
examples:
  lit-sb3 train ars CartPole-v1 --total-timesteps 50000 --save runs/ars_cartpole
  lit-sb3 train ppo CartPole-v1 --workers 2 --total-timesteps 50000 --save runs/ppo_cartpole
  lit-sb3 evaluate runs/ars_cartpole.zip CartPole-v1 --episodes 10
  lit-sb3 evaluate --random-population CartPole-v1 --pop-size 32
  lit-sb3 bench

lit-sb3 COMMAND --help shows the options and examples of each command.
"""


def build_parser() -> OneLineParser:
    """:return: The parser of the ``lit-sb3`` command line."""
    parser = OneLineParser(
        prog="lit-sb3",
        description="Population-based and asynchronous RL on Stable-Baselines3: train ARS, ES, CEM, CMA-ES, PGPE, "
        "SNES, XNES or a gradient agent with async episode collection, evaluate, benchmark.",
        epilog=EXAMPLES,
        formatter_class=ExampleFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    train.add_parser(commands)
    evaluate.add_parser(commands)
    bench.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """
    Entry point of ``lit-sb3``. A user's mistake is printed on one line to standard error, with exit status 1.

    :param argv: Arguments (``sys.argv[1:]`` by default).
    """
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        args.run(args)
    except CliError as error:
        print(f"lit-sb3 {args.command}: error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print(f"lit-sb3 {args.command}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
