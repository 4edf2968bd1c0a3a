"""``PYTHONPATH=hack python -m bench`` (``make bench``): the benchmarks, each part against its
peers measured in the same run, written into ``docs/benchmarks.md`` (and printed): the parts
run replace their sections there, the rest of the file is kept (``bench.report.merge``).

Parts: ``trainer`` (step time and tokens/s against TRL, ``bench.trainer``), ``operator`` (N
runs at once against KubeRay's RayJob controller, ``bench.operator_vs_rayjob``),
``failover`` (the operator's leader killed mid-provisioning, ``bench.failover``) and
``recovery`` (a driver or Ray worker pod killed → training resumed, ``bench.recovery``). Each
exposes ``sections(progress) -> list[str]``: markdown sections, progress lines as it goes.

    PYTHONPATH=hack .venv/bin/python -m bench --only operator --runs 50
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import shlex
import sys
import time
from pathlib import Path

from bench import report

PARTS = {"trainer": "bench.trainer", "operator": "bench.operator_vs_rayjob",
         "failover": "bench.failover", "recovery": "bench.recovery"}
OUT = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def _parts(text: str) -> list[str]:
    parts = [p for p in text.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(unknown)}; "
                                         f"choose from {', '.join(PARTS)}")
    return parts


def _runs(text: str) -> tuple[int, ...]:
    try:
        runs = tuple(int(n) for n in text.split(",") if n)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--runs takes numbers, e.g. 50,200: {e}") from e
    if not runs or min(runs) < 1:
        raise argparse.ArgumentTypeError("--runs takes positive numbers, e.g. 50,200")
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", type=_parts, default=list(PARTS),
                        help=f"comma-separated parts to run (default: {','.join(PARTS)})")
    parser.add_argument("--runs", type=_runs, default=None,
                        help="operator part: the numbers of runs applied at once "
                        "(default: 50,200,1000)")
    parser.add_argument("--out", type=Path, default=OUT,
                        help="the markdown file the parts run are written into, keeping "
                        "its other sections and notes (default: docs/benchmarks.md)")
    args = parser.parse_args()
    started, clock = datetime.datetime.now(datetime.UTC), time.monotonic()

    def progress(message: str) -> None:
        print(f"[bench {time.monotonic() - clock:6.0f}s] {message}", flush=True)

    progress(f"{report.machine()}; {report.load()}")
    sections: list[str] = []
    for part in args.only:
        module_name = PARTS[part]
        if importlib.util.find_spec(module_name) is None:
            progress(f"{part}: {module_name} is not there; skipped")
            continue
        module = importlib.import_module(module_name)
        progress(f"{part}: starting")
        part_clock = time.monotonic()
        if part == "operator" and args.runs:
            found = module.sections(progress, runs=args.runs)
        else:
            found = module.sections(progress)
        progress(f"{part}: done in {(time.monotonic() - part_clock) / 60:.1f} min")
        sections.extend(found)
    command = shlex.join(["PYTHONPATH=hack", "python", "-m", "bench", *sys.argv[1:]])
    line = report.provenance(command, started=started, seconds=time.monotonic() - clock,
                             machine_line=report.machine())
    sections = [report.stamped(section, line) for section in sections]
    text = fresh = report.document(sections)
    if args.out.exists():
        previous = args.out.read_text()
        try:
            text = report.merge(previous, sections)
        except ValueError as e:  # the run's figures are not lost to a hand-edited file
            aside = args.out.with_name(args.out.name + ".new")
            aside.write_text(fresh)
            progress(f"{args.out} left as it was ({e}); this run's sections are in {aside}")
            return 1
        measured = report.sections_of(fresh)
        kept = [heading for heading in report.sections_of(previous) if heading not in measured]
        if kept:
            progress(f"kept from {args.out} as they were: {', '.join(kept)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    progress(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
