"""``wavygraph demo``: a small depth sweep on a built-in synthetic graph.

No download: the graph is the ``small`` preset of the ``csbm`` data set
(contextual stochastic block model, 2,000 nodes, 5 classes, generated on the
fly). The demo writes the equivalent sweep file to ``OUT/demo_sweep.yaml``,
runs it with :mod:`wavygraph.sweep` (resumable: rerun to finish an
interrupted demo) and reports with :mod:`wavygraph.report`. The defaults
(depths 2, 8, 32; every registered residual kind; 2 seeds; 60 epochs) take a few
minutes on a laptop CPU and show the collapse of deep diffusion.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

from .nn.steppers import STEPPERS, plugin_modules
from .utils import folder_problem

DEFAULT_OUT = "runs/demo"
#: The fixed settings of every demo cell.
DEMO_SET = {
    "data.name": "csbm",
    "data.csbm.preset": "small",
    "model.hidden_channels": 32,
    "model.dropout": 0.2,
    # the depth recipe (docs/results.md, "Which residual for deep graph transformers?"):
    # local branch blended with the global one, no dropout after each layer
    "model.graph_weight": 0.5,
    "model.layer_dropout": 0.0,
    "train.lr": 0.005,
    "train.weight_decay": 0.01,
}


def _ints(text: str, least: int = 0) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < least:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= {least}, got {text!r}")
    return values


def demo_spec(out: str, depths, seeds, epochs: int, residuals=None) -> dict:
    """The demo's sweep as the mapping of a sweep file (``grid``, ``set``,
    ``out_dir``); ``residuals`` defaults to every registered kind (plugins
    included: their modules go into ``imports``)."""
    residuals = tuple(STEPPERS) if residuals is None else tuple(residuals)
    plugins = plugin_modules(residuals)
    return {
        "grid": {
            "model.num_layers": list(depths),
            "model.residual": list(residuals),
            "train.seed": list(seeds),
        },
        "set": {**DEMO_SET, "train.epochs": int(epochs), **({"imports": plugins} if plugins else {})},
        "out_dir": out,
    }


def demo_sweep_file(out: str, depths, seeds, epochs: int, residuals=None) -> Path:
    """Write the demo's sweep file ``OUT/demo_sweep.yaml`` (:func:`demo_spec`)
    and return its path."""
    spec = demo_spec(out, depths, seeds, epochs, residuals)
    Path(out).mkdir(parents=True, exist_ok=True)
    path = Path(out) / "demo_sweep.yaml"
    header = "# written by `wavygraph demo`; rerun with: wavygraph sweep " + str(path) + "\n"
    path.write_text(header + yaml.safe_dump(spec, sort_keys=False))
    return path


def run_demo(out: str = DEFAULT_OUT, depths=(2, 8, 32), seeds=(0, 1), epochs: int = 60, jobs: int = 1,
             residuals=None, progress: bool = True) -> dict:
    """Run the demo sweep and its report; returns the report's paths and the
    sweep's counts (``counts``). The sweep's checks (cells, data, folder) run
    before ``OUT/demo_sweep.yaml`` is written, so a bad option writes nothing."""
    from .report import make_report
    from .sweep import Sweep, run_sweep

    for name, value, least in (("--epochs", epochs, 1), ("--jobs", jobs, 1)):
        if value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")
    spec = demo_spec(out, depths, seeds, epochs, residuals)
    sweep = Sweep(base=None, grid=spec["grid"], set=spec["set"], out_dir=out,
                  source=os.path.abspath(os.path.join(out, "demo_sweep.yaml")))
    counts = run_sweep(sweep, jobs=jobs, progress=progress, log=lambda line: None,
                       on_checked=lambda: demo_sweep_file(out, depths, seeds, epochs, residuals))
    if counts["failed"]:
        failed = os.path.join(out, "failed")
        raise RuntimeError(f"{counts['failed']} demo cells failed; tracebacks in {failed}")
    paths = make_report(out, depth=max(depths))
    paths["counts"] = counts
    return paths


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``wavygraph demo``."""
    p = subparsers.add_parser(
        "demo",
        help="a small depth sweep on a built-in synthetic graph (no download)",
        description="Depth sweep (every registered residual kind) on the small csbm synthetic graph; "
        "prints the summary table and where the plots are.",
    )
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--depths", type=lambda text: _ints(text, 1), default=[2, 8, 32],
                   help="comma-separated depths (default 2,8,32)")
    p.add_argument("--seeds", type=_ints, default=[0, 1], help="comma-separated seeds (default 0,1)")
    p.add_argument("--epochs", type=int, default=60, help="epochs per run (default 60)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=command)
    return p


def command(args: argparse.Namespace) -> int:
    if args.epochs < 1:
        raise ValueError(f"--epochs must be >= 1, got {args.epochs}")
    problem = folder_problem(args.out, "--out")  # a file, under a file, not writable: before anything is written
    if problem:
        raise ValueError(problem)
    paths = run_demo(args.out, args.depths, args.seeds, args.epochs, args.jobs, progress=not args.no_progress)
    counts = paths["counts"]
    print(f"demo: {counts['cells']} runs ({counts['done']} new, {counts['skipped']} reused) in {args.out}\n")
    print(Path(paths["summary"]).read_text())
    print(f"table:       {paths['summary']}")
    print(f"all runs:    {paths['results']}")
    print(f"plot:        {paths['score_plot']}")
    if paths["diagnostics"] is not None:
        print(f"diagnostics: {paths['diagnostics']}")
    return 0
