"""``wavygraph tune CONFIG --space SPACE.yaml [key=value ...] [--trials N]
[--timeout SECONDS] [--jobs K] [--devices D1,D2] [--storage URL]
[--study-name NAME] [--seed S] [--pruner median|hyperband|none] [--warmup E]
[--final-seeds S1,S2,...] [--final-top K] [--no-progress]``."""
from __future__ import annotations

import argparse
import json
import math
import os
import time

from wavygraph.checks import split_options

PRUNERS = ("median", "hyperband", "none")


def _add_options(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    d = (lambda v: v) if defaults else (lambda v: argparse.SUPPRESS)
    p.add_argument("--space", default=d(None), metavar="SPACE.yaml", help="the search space (required)")
    p.add_argument("--trials", type=int, default=d(20), metavar="N",
                   help="trials that count (complete or pruned) over every process of the study (default 20)")
    p.add_argument("--timeout", type=float, default=d(None), metavar="SECONDS",
                   help="start no trial after this many seconds (running trials finish)")
    p.add_argument("--jobs", type=int, default=d(1), metavar="K", help="trials at once on this machine (default 1)")
    p.add_argument("--devices", default=d(None), metavar="D1,D2",
                   help="comma-separated devices the jobs are spread over (e.g. cuda:0,cuda:1)")
    p.add_argument("--storage", default=d(None), metavar="URL",
                   help="Optuna storage: an SQLAlchemy URL or journal:PATH (default: sqlite file out_dir/study.db)")
    p.add_argument("--study-name", default=d(None), metavar="NAME",
                   help="the study's name in the storage (default: the name of out_dir)")
    p.add_argument("--seed", type=int, default=d(None), help="the sampler's seed (default: train.seed)")
    p.add_argument("--pruner", default=d("median"), choices=PRUNERS, help="stops hopeless trials (default median)")
    p.add_argument("--warmup", type=int, default=d(None), metavar="EPOCHS",
                   help="epochs before a trial may be pruned (default: a quarter of train.epochs)")
    p.add_argument("--pruner-startup", type=int, default=d(5), metavar="N",
                   help="median pruner: trials that finish before it prunes (default 5)")
    p.add_argument("--final-seeds", default=d(None), metavar="S1,S2",
                   help="rerun the best configs on these seeds: final.json, test mean and std")
    p.add_argument("--final-top", type=int, default=d(3), metavar="K",
                   help="with --final-seeds: rerun the K trials of the highest validation score and keep the one "
                        "with the highest mean validation over the seeds (default 3; 1: the best trial only)")
    p.add_argument("--no-progress", action="store_true", default=d(False), help="no progress bar")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``wavygraph tune``."""
    p = subparsers.add_parser(
        "tune",
        help="search hyperparameters by validation score (Optuna; resumable, parallel)",
        description=(
            "Search the keys of SPACE.yaml on CONFIG (defaults < YAML < key=value) by the best validation "
            "score of each trial's run, with TPE and a pruner. Every trial is a run folder in "
            "out_dir/trials/<number>/; rerunning the same command resumes the study. Writes trials.csv, "
            "best.yaml and, with --final-seeds, final.json. Options and key=value may come in any order."
        ),
    )
    p.add_argument("config", help="base config YAML")
    p.add_argument("overrides", nargs=argparse.REMAINDER, metavar="key=value", help="overrides of the base config")
    _add_options(p)
    p.set_defaults(func=command)
    return p


def _check_args(args: argparse.Namespace) -> None:
    from .space import SpaceError

    if not args.space:
        raise SpaceError("--space SPACE.yaml is required (e.g. configs/spaces/wavy.yaml)")
    for name, value in (("--trials", args.trials), ("--jobs", args.jobs), ("--final-top", args.final_top)):
        if value < 1:
            raise SpaceError(f"{name} must be >= 1, got {value}")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise SpaceError(f"--timeout must be > 0 seconds and finite (leave it out for no limit), got {args.timeout}")
    if args.warmup is not None and args.warmup < 0:
        raise SpaceError(f"--warmup must be >= 0 epochs, got {args.warmup}")
    if args.pruner_startup < 0:
        raise SpaceError(f"--pruner-startup must be >= 0, got {args.pruner_startup}")


#: what a tune folder holds (another process of the study may be writing its first files)
TUNE_FILES = ("tune.json", ".tune.lock", "study.db", "study.db-journal", "trials", "tmp", "failed", "trials.csv",
              "best.yaml", "best", "final", "final.json")


def _check_out_dir(out_dir: str, storage: str) -> None:
    """An existing ``out_dir`` must be a tune folder (or empty, or hold the study's storage file)."""
    from wavygraph.utils import folder_problem

    from .space import SpaceError

    if os.path.isfile(out_dir):
        raise SpaceError(f"out_dir {out_dir} is a file; name a folder")
    problem = folder_problem(out_dir, "out_dir")  # under a file, not writable
    if problem:
        raise SpaceError(problem)
    if not os.path.isdir(out_dir) or os.path.isfile(os.path.join(out_dir, "tune.json")):
        return
    own = os.path.basename(storage.split(":", 1)[1] if storage.startswith("journal:") else storage)
    other = sorted(set(os.listdir(out_dir)) - set(TUNE_FILES) - {own})
    if other:
        raise SpaceError(f"out_dir {out_dir} holds {other[0]!r} and no tune.json (not a tune folder); "
                         "use a new out_dir")


def _check_devices_and_data(base, devices: str | None) -> None:
    """The devices and the base config's data, checked once before anything is
    written (as a sweep does): otherwise every trial would fail alike."""
    from wavygraph.train.env import resolve_device
    from wavygraph.train.run_state import load_data

    for name in [d for d in (devices or "").split(",") if d] or [base.train.device]:
        try:
            resolve_device(name)
        except ValueError as exc:
            raise type(exc)(f"--devices: {exc}" if devices else str(exc)) from None
    load_data(base.data)


def build_spec(args: argparse.Namespace):
    """Check the arguments, the space and the base config; returns ``(spec, signature)``.
    Nothing is written."""
    from wavygraph.fingerprint import content_of, data_fingerprint
    from wavygraph.sweep.spec import cell_hash

    from omegaconf import OmegaConf

    from wavygraph.config import load_config

    from .space import load_space
    from .storage import check_storage_url, default_storage
    from .trial import TuneSpec

    _check_args(args)
    overrides = [o for o in args.overrides if o]
    space = load_space(args.space, args.config, overrides)
    base = load_config(args.config, space.fixed_overrides() + overrides)
    out_dir = str(base.out_dir)
    storage = args.storage or default_storage(out_dir)
    check_storage_url(storage, given=bool(args.storage))
    _check_out_dir(out_dir, storage)
    _check_devices_and_data(base, args.devices)
    epochs = int(base.train.epochs)
    given = {o.split("=", 1)[0] for o in overrides} | set(space.fixed)
    spec = TuneSpec(
        config=args.config, overrides=overrides, space=space, out_dir=out_dir, storage=storage,
        study_name=args.study_name or os.path.basename(os.path.normpath(os.path.abspath(out_dir))),
        trials=args.trials, deadline=time.time() + args.timeout if args.timeout else None,
        seed=base.train.seed if args.seed is None else args.seed, pruner=args.pruner,
        warmup=epochs // 4 if args.warmup is None else args.warmup, startup=args.pruner_startup,
        diagnostics=bool(base.train.diagnostics) if "train.diagnostics" in given else False,
        extra={"epochs": epochs},
    )
    resolved = OmegaConf.to_container(base, resolve=True)
    signature = {"base": cell_hash(resolved), "params": space.params, "fixed": space.fixed}
    if space.starts:  # only where given, so that studies started before starts existed still resume
        signature["starts"] = space.starts
    files = content_of(data_fingerprint(resolved.get("data")))
    if files:  # a graph file's content: a study resumed on another version of it would mix its trials
        signature["data"] = files
    return spec, signature


def command(args: argparse.Namespace) -> int:
    from .study import tune
    from .trial import parse_seeds

    args = split_options(args, "wavygraph tune", _add_options)
    seeds = parse_seeds(args.final_seeds)
    spec, signature = build_spec(args)
    devices = [d for d in (args.devices or "").split(",") if d]
    summary = tune(spec, signature, args.jobs, devices, show=not args.no_progress, final_seeds=seeds,
                   final_top=args.final_top)
    wrote = summary.pop("wrote")
    print(json.dumps(summary), flush=True)
    print(f"wrote {', '.join(wrote)}", flush=True)
    if "best_trial" not in summary:
        why = f"; the last error: {summary['last_error']}" if "last_error" in summary else ""
        print(f"wavygraph: no trial completed (all pruned or failed){why}; see trials.csv and failed/", flush=True)
        return 1
    return 0
