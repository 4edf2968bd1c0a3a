"""``python -m grpo_trainer COMMAND``: the trainer image's command line.

Each subcommand lives with the code it drives and registers itself here through a
``register(subparsers)`` function that adds its parser and sets ``handler`` (a function of the
parsed arguments returning the exit code). Registration must stay cheap: a module imports its
heavy dependencies (Ray, torch) inside its handler, so ``--help`` and the other subcommands
never pay for them. To add a subcommand (``run``, ``digest``), append its ``register`` to
``COMMANDS``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from grpo_trainer import frozen_inputs
from grpo_trainer import run as trainer_run
from grpo_trainer.driver import cli as driver_cli
from grpo_trainer.driver import drain

COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    driver_cli.register,
    drain.register,  # `drain`: a preStop hook for Ray pods (grpo_trainer/driver/drain.py)
    trainer_run.register,  # `run`: train (grpo_trainer/run.py)
    frozen_inputs.register,  # `digest`: a frozen input's digest (grpo_trainer/frozen_inputs.py)
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m grpo_trainer",
        description="The GRPO trainer image's commands.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
