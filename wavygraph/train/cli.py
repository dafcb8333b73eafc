"""``wavygraph train CONFIG.yaml [key=value ...]``."""
from __future__ import annotations

import argparse
import os
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train one model on one data set",
        description="Train per CONFIG (defaults < YAML < key=value overrides); writes "
        "config.yaml, model.pt and metrics.json into a work folder beside out_dir "
        "(.NAME.partial) and renames it to out_dir when the run ends: out_dir is "
        "complete or untouched. An out_dir that holds a run is refused unless "
        "--overwrite or --resume.",
    )
    parser.add_argument("config", nargs="?", default=None, help="YAML config file (optional)")
    # key=value overrides mixed with options: collected here, split in main()
    parser.add_argument("overrides", nargs=argparse.REMAINDER, default=[],
                        help="key=value overrides, e.g. model.num_layers=8")
    _add_options(parser)
    parser.set_defaults(func=main)
    return parser


def _add_options(parser: argparse.ArgumentParser, defaults: bool = True) -> None:
    d = False if defaults else argparse.SUPPRESS
    parser.add_argument("--resume", action="store_true", default=d,
                        help="continue from the checkpoint.pt of an interrupted run (kept in .NAME.partial "
                             "beside out_dir) or of out_dir (same as train.resume=true)")
    parser.add_argument("--overwrite", action="store_true", default=d,
                        help="replace the run in out_dir when this run ends (it stays untouched until then)")


def main(args: argparse.Namespace) -> int:
    from wavygraph.checks import split_options
    from wavygraph.config import load_config
    from wavygraph.train import run
    from wavygraph.train.env import resolve_device
    from wavygraph.utils import dumps_json
    from wavygraph.train.loop import NonFiniteLossError

    args = split_options(args, "wavygraph train", _add_options)
    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not config.endswith((".yaml", ".yml")):
        config, overrides = None, [config] + overrides
    if getattr(args, "resume", False):
        overrides.append("train.resume=true")
    cfg = load_config(config, overrides)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks
        device = resolve_device(cfg.train.device)
        print(f"wavygraph: training {cfg.data.name} on {device} (train.device={cfg.train.device})", flush=True)
    try:
        metrics = run(cfg, overwrite=getattr(args, "overwrite", False))
    except NonFiniteLossError as exc:  # one line; out_dir keeps the best epoch so far
        print(f"wavygraph: error: {exc} (out_dir={cfg.out_dir})", file=sys.stderr)
        return 2
    if not metrics:  # a distributed rank other than 0: rank 0 reports
        return 0
    keys = ("metric", "num_tasks", "evaluator", "best_val", "test", "best_epoch", "epochs", "seconds",
            "seconds_per_epoch", "peak_memory_mb", "num_params", "device")
    summary = {k: metrics[k] for k in keys}
    try:
        print(dumps_json(summary))
        print(f"wrote {cfg.out_dir}/config.yaml, model.pt, metrics.json", flush=True)
    except BrokenPipeError:  # e.g. piped into head
        pass
    return 0
