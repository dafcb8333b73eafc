"""``wavygraph sweep SWEEP_FILE [key=value ...] [--shard I/N] [--jobs K]
[--devices D1,D2] [--dry-run] [--no-progress]`` (also ``python -m
wavygraph.sweep ...``)."""
from __future__ import annotations

import argparse
import sys
import warnings
from typing import Sequence

from wavygraph.checks import OneLineParser, split_options
from wavygraph.utils import ignore_import_warnings

from .runner import run_sweep
from .spec import expand, load_sweep, parse_shard, shard_cells
from .store import is_done


def _add_options(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    d = (lambda v: v) if defaults else (lambda v: argparse.SUPPRESS)
    p.add_argument("--shard", metavar="I/N", default=d(None),
                   help="run only the I-th of N disjoint parts (0-based; e.g. $SLURM_ARRAY_TASK_ID/N)")
    p.add_argument("--jobs", type=int, default=d(1), metavar="K", help="cells at once on this machine (default 1)")
    p.add_argument("--devices", default=d(None), metavar="D1,D2",
                   help="comma-separated devices the jobs are spread over (e.g. cuda:0,cuda:1)")
    p.add_argument("--dry-run", action="store_true", default=d(False), help="list the cells of this shard and exit")
    p.add_argument("--no-progress", action="store_true", default=d(False), help="no progress bar")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``wavygraph sweep``."""
    p = subparsers.add_parser(
        "sweep",
        help="run a grid of train runs (resumable, shardable, parallel)",
        description=(
            "Run every cell of a sweep file as a train run into OUT/cells/<hash>/. "
            "Rerunning the same command skips finished cells. key=value applies to "
            "every cell, grid.KEY=[a,b] replaces one grid list, out_dir=DIR the output folder. "
            "Options and key=value may come in any order after SWEEP_FILE."
        ),
    )
    p.add_argument("sweep_file", help="sweep YAML (base, grid, set, out_dir)")
    # key=value overrides mixed with options: collected here, split in command()
    p.add_argument("overrides", nargs=argparse.REMAINDER, metavar="key=value", help="overrides (see above)")
    _add_options(p)
    p.set_defaults(func=command)
    return p


def command(args: argparse.Namespace) -> int:
    args = split_options(args, "wavygraph sweep", _add_options)
    sweep = load_sweep(args.sweep_file, args.overrides)
    index, count = parse_shard(args.shard)
    devices = args.devices.split(",") if args.devices else None
    if args.dry_run:
        cells = expand(sweep)
        mine = shard_cells(cells, index, count)
        for c in mine:
            state = "done" if is_done(sweep.out_dir, c.hash) else "todo"
            print(c.hash, state, " ".join(f"{k}={v}" for k, v in c.params.items()))
        print(f"{len(mine)} of {len(cells)} cells in this shard")
        return 0
    counts = run_sweep(sweep, index, count, args.jobs, devices, progress=not args.no_progress)
    return 1 if counts["failed"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m wavygraph.sweep ...``: the same as ``wavygraph sweep ...``."""
    parser = OneLineParser(prog="wavygraph")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["sweep", *(sys.argv[1:] if argv is None else argv)])
    try:
        with warnings.catch_warnings():
            ignore_import_warnings()
            return args.func(args)
    except ValueError as exc:
        print(f"wavygraph: error: {exc}", file=sys.stderr)
        return 2
