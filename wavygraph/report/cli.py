"""``wavygraph report DIR [--depth D] [--out OUT] [--best-worst]`` and
:func:`make_report`, which writes every file of a report."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from wavygraph.utils import folder_problem

from .plots import plot_diagnostics, plot_score_vs_depth
from .results import ReportError, best_and_worst, load_cells, load_results
from .tables import write_summary


def make_report(
    out_dir: str | os.PathLike, depth: int | None = None, dest: str | os.PathLike | None = None,
    best_worst: bool = False,
) -> dict:
    """Write ``results.csv``, ``summary.md`` and the plots; returns their paths
    (``diagnostics`` is ``None`` when no cell has diagnostics). With
    ``best_worst`` also ``diagnostics_depth<D>_best_worst.png``: only the
    variants with the highest and the lowest mean test score at that depth."""
    source = Path(out_dir)
    target = Path(dest) if dest is not None else source
    problem = folder_problem(target, "--out" if dest is not None else "DIR")
    if problem:
        raise ReportError(problem)
    records = load_cells(source)  # every check before the first file is written
    df = load_results(source, records)
    depths = sorted(df["depth"].unique())
    if depth is None:
        depth = int(depths[-1])
    elif depth not in depths:
        raise ReportError(f"--depth {depth}: the sweep has depths {', '.join(map(str, depths))}")
    variants = best_and_worst(df, depth) if best_worst else None
    target.mkdir(parents=True, exist_ok=True)
    csv = target / "results.csv"
    df.to_csv(csv, index=False)
    paths = {
        "results": csv,
        "summary": write_summary(df, target, source),
        "score_plot": plot_score_vs_depth(df, target / "score_vs_depth.png"),
        "diagnostics": plot_diagnostics(records, depth, target / f"diagnostics_depth{depth}.png"),
    }
    if best_worst:
        paths["diagnostics_best_worst"] = plot_diagnostics(
            records, depth, target / f"diagnostics_depth{depth}_best_worst.png",
            variants=variants, title=": best and worst test score")
    return paths


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``wavygraph report``."""
    p = subparsers.add_parser(
        "report",
        help="tables and plots of a sweep or tune folder",
        description="Write results.csv, summary.md, score_vs_depth.png and "
        "diagnostics_depth<D>.png from the finished cells of a sweep folder.",
    )
    p.add_argument("dir", help="the sweep's out_dir")
    p.add_argument("--depth", type=int, default=None, help="depth of the diagnostics plot (default: the largest)")
    p.add_argument("--out", default=None, help="where to write (default: DIR)")
    p.add_argument("--best-worst", action="store_true",
                   help="also plot the diagnostics of only the best and the worst variant at --depth "
                        "(diagnostics_depth<D>_best_worst.png)")
    p.set_defaults(func=command)
    return p


def command(args: argparse.Namespace) -> int:
    from .tune import is_tune_folder, make_tune_report

    if is_tune_folder(args.dir):  # a `wavygraph tune` folder: its own summary and plots
        paths = make_tune_report(args.dir, args.out)
    else:
        paths = make_report(args.dir, args.depth, args.out, best_worst=args.best_worst)
    print(Path(paths["summary"]).read_text())
    for name, path in paths.items():
        if path is not None:
            print(f"{name}: {path}")
    return 0
