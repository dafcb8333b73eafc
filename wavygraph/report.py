r"""Tables and plots of a sweep folder (``wavygraph report DIR``).

Reads ``DIR/cells/*/cell.json`` (written by :mod:`wavygraph.sweep`) and
writes into ``DIR`` (or ``--out``):

* ``results.csv``: one row per cell: the grid values, ``depth``,
  ``residual``, ``seed``, ``split`` (``data.split``), the scores, and the
  last layer's value of every diagnostic (``<measure>_last``);
* ``summary.md``: test score mean ± std (sample std over seeds and data
  splits: a grid over ``data.split`` repeats runs as seeds do; count in
  brackets) per residual kind (columns) and depth (rows), the best mean of
  each depth in bold; one table per combination of the other grid keys, and
  then all of them in one table (a row per variant, a column per depth);
* ``score_vs_depth.png``: test score against depth per residual kind, mean
  with a ±std band;
* ``diagnostics_depth<D>.png``: every diagnostic against the layer index
  for depth ``D`` (``--depth``, default the largest), one line (mean over
  seeds, ±std band) per residual kind (and values of the other grid keys);
* with ``--best-worst``, ``diagnostics_depth<D>_best_worst.png``: the same
  for only the best and the worst of them at that depth.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from .nn.steppers import STEPPERS

CELL_FILE = "cell.json"
SCORE_COLUMNS = ("test", "best_val", "best_epoch", "epochs", "seconds", "num_params")
DIAGNOSTICS = ("dirichlet_energy", "feature_variance", "inter_class_variance", "cosine_similarity", "spectral_gap")
#: grid keys that repeat a run rather than vary the model: averaged over
REPEAT_KEYS = ("train.seed", "data.split")
#: grid keys with their own place in every table (depth, kind) or averaged over
_GRID_FIXED = ("model.num_layers", "model.residual", *REPEAT_KEYS)


class ReportError(ValueError):
    """A folder that holds no sweep results, or a bad option."""


def _get(tree: dict, dotted: str, default=None):
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return default
        tree = tree[part]
    return tree


def load_cells(out_dir: str | os.PathLike) -> list[dict]:
    """Every complete cell record of a sweep folder, in hash order."""
    root = Path(out_dir) / "cells"
    if not root.is_dir():
        raise ReportError(f"{out_dir} holds no sweep results (no cells/ folder); run `wavygraph sweep` first")
    records = []
    for path in sorted(root.glob(f"*/{CELL_FILE}")):
        with open(path) as fh:
            records.append(json.load(fh))
    return records


def _residual_order(values) -> list:
    known = [r for r in STEPPERS if r in set(values)]
    return known + sorted(set(values) - set(known), key=str)


def _grid_keys(records: Sequence[dict]) -> list[str]:
    """Every grid key of the cells, in first-seen order."""
    keys: list[str] = []
    for rec in records:
        keys += [k for k in rec["params"] if k not in keys]
    return keys


def load_results(out_dir: str | os.PathLike, records: Sequence[dict] | None = None) -> pd.DataFrame:
    """``results.csv`` as a data frame: one row per cell, sorted by the other
    grid keys, residual kind (in the order diffusion, wave, mix,
    light_wave), depth and seed. ``records``: the folder's cells when
    already read (:func:`load_cells`)."""
    if records is None:
        records = load_cells(out_dir)
    if not records:
        raise ReportError(f"{out_dir} holds no finished cells yet")
    grid_keys = _grid_keys(records)
    rows = []
    for rec in records:
        cfg, metrics = rec["config"], rec.get("metrics") or {}
        row = {"hash": rec["hash"]}
        for key in grid_keys:
            value = rec["params"].get(key, _get(cfg, key))
            row[key] = value
        row["depth"] = _get(cfg, "model.num_layers")
        arch = _get(cfg, "model.arch", "wavy")  # a baseline (gcn, gcnii, ...) is its own column
        row["residual"] = _get(cfg, "model.residual") if arch == "wavy" else arch
        row["seed"] = _get(cfg, "train.seed")
        row["split"] = _get(cfg, "data.split")
        row["dataset"] = _get(cfg, "data.name")
        metric = metrics.get("metric")
        row["metric"] = metric if isinstance(metric, str) else "score"
        for col in SCORE_COLUMNS:
            row[col] = metrics.get(col)
        for name, values in (metrics.get("diagnostics") or {}).items():
            row[f"{name}_last"] = values[-1] if values else None
        rows.append(row)
    df = pd.DataFrame(rows)
    order = {r: i for i, r in enumerate(_residual_order(df["residual"]))}
    others = other_keys(df)
    df["_r"] = df["residual"].map(order)
    df = df.sort_values([*others, "_r", "depth", "seed", "split", "hash"], kind="stable").drop(columns="_r")
    return df.reset_index(drop=True)


def other_keys(df: pd.DataFrame) -> list[str]:
    """Grid keys besides depth, residual kind, seed and data split: each
    combination of their values gets its own table and plot line set.
    ``model.arch`` is not one: a baseline's arch already names its column in
    place of the kind."""
    skip = {"hash", "depth", "residual", "seed", "split", "dataset", "metric", *SCORE_COLUMNS,
            "model.arch", *_GRID_FIXED}
    return [c for c in df.columns if c not in skip and not c.endswith("_last")]


def _percent(df: pd.DataFrame) -> bool:
    scores = df["test"].dropna()
    return len(scores) > 0 and bool(((scores >= 0) & (scores <= 1)).all())


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std and count of the test score per (other keys,
    residual, depth)."""
    keys = [*other_keys(df), "residual", "depth"]
    grouped = df.groupby(keys, sort=False, dropna=False)["test"]
    out = grouped.agg(mean="mean", std="std", n="count").reset_index()
    return out


def _score_cell(at: pd.DataFrame, key, scale: float, best: float) -> str:
    """``mean ± std (n)`` of row ``key`` of an :func:`aggregate` slice, in
    bold when it is the ``best`` mean; ``—`` for a missing or empty row."""
    if key not in at.index or at.loc[key, "n"] == 0:
        return "—"
    mean, std, n = at.loc[key, "mean"], at.loc[key, "std"], int(at.loc[key, "n"])
    text = f"{mean * scale:.2f}" + (f" ± {std * scale:.2f}" if n > 1 and not math.isnan(std) else "")
    return (f"**{text}**" if mean == best else text) + f" ({n})"


def summary_table(df: pd.DataFrame) -> str:
    """The markdown tables of ``summary.md`` (without its heading)."""
    scale = 100.0 if _percent(df) else 1.0
    agg = aggregate(df)
    residuals = _residual_order(agg["residual"])
    others = other_keys(df)
    metric = ", ".join(sorted(set(df["metric"].astype(str))))
    unit = " (%)" if scale == 100.0 else ""
    over = "seeds and data splits" if df["split"].nunique(dropna=False) > 1 else "seeds"
    lines = [f"test {metric}{unit} at the best validation epoch, mean ± std over {over} (runs)", ""]
    groups = [((), agg)] if not others else list(agg.groupby(others, sort=False, dropna=False))
    for key, part in groups:
        if others:
            key = key if isinstance(key, tuple) else (key,)
            lines += ["**" + ", ".join(f"{k}={v}" for k, v in zip(others, key)) + "**", ""]
        lines.append("| layers | " + " | ".join(residuals) + " |")
        lines.append("|---:|" + "---:|" * len(residuals))
        for depth in sorted(part["depth"].unique()):
            at = part[part["depth"] == depth].set_index("residual")
            best = at["mean"].max()
            cells = [_score_cell(at, r, scale, best) for r in residuals]
            lines.append(f"| {depth} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def variant_table(df: pd.DataFrame) -> str:
    """One markdown table of every variant (residual kind and the values of
    the other grid keys, :func:`variant_label`) against depth: mean ± std
    (runs), the best per depth in bold."""
    scale = 100.0 if _percent(df) else 1.0
    agg = aggregate(df)
    others = other_keys(df)
    order = {r: i for i, r in enumerate(_residual_order(agg["residual"]))}
    agg = agg.assign(variant=_variant_labels(agg, others), _r=agg["residual"].map(order))
    depths = sorted(agg["depth"].unique())
    best = agg.groupby("depth")["mean"].max()
    lines = ["| variant | " + " | ".join(f"{d} layers" for d in depths) + " |",
             "|---|" + "---:|" * len(depths)]
    for variant, part in agg.sort_values(["_r", *others], kind="stable").groupby("variant", sort=False):
        at = part.set_index("depth")
        cells = [_score_cell(at, d, scale, best[d]) for d in depths]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _expected_cells(out_dir: Path) -> int | None:
    manifest = out_dir / "sweep.json"
    if not manifest.is_file():
        return None
    with open(manifest) as fh:
        return len(json.load(fh).get("cells", []))


def write_summary(df: pd.DataFrame, out_dir: Path, source: Path) -> Path:
    expected = _expected_cells(source)
    count = f"{len(df)} cells" + (f" of {expected}" if expected is not None else "")
    datasets = ", ".join(sorted(set(map(str, df["dataset"]))))
    text = f"# Sweep results\n\ndata: {datasets}; {count}\n\n" + summary_table(df)
    if other_keys(df):
        text += "\n## Every variant against depth\n\n" + variant_table(df)
    path = out_dir / "summary.md"
    path.write_text(text)
    return path


def _band(ax, x, mean, std, label, positive: bool = False):
    line, = ax.plot(x, mean, marker="o", ms=3, label=label)
    lo, hi = mean - std.fillna(0.0), mean + std.fillna(0.0)
    if positive:  # log axis: keep the band above 0 (at most a factor 10 below the mean)
        lo = lo.where(lo > mean / 10, mean / 10)
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)


def plot_score_vs_depth(df: pd.DataFrame, path: Path) -> Path:
    """Test score against depth per residual kind (log2 depth axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = 100.0 if _percent(df) else 1.0
    agg = aggregate(df)
    others = other_keys(df)
    groups = [((), agg)] if not others else list(agg.groupby(others, sort=False, dropna=False))
    cols = min(3, len(groups))
    rows = math.ceil(len(groups) / cols)
    # panels share the score axis, at most three per row
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4 * rows), squeeze=False, sharey=True)
    depths = sorted(agg["depth"].unique())
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    for ax, (key, part) in zip(axes.flat, groups):
        for r in _residual_order(part["residual"]):
            sub = part[part["residual"] == r].sort_values("depth")
            _band(ax, sub["depth"], sub["mean"] * scale, sub["std"] * scale, r)
        if len(depths) > 1 and min(depths) > 0:
            ax.set_xscale("log", base=2)
        ax.set_xticks(depths, [str(d) for d in depths])
        ax.set_xlabel("layers")
        ax.set_ylabel(f"test {df['metric'].iloc[0]}" + (" (%)" if scale == 100.0 else ""))
        if others:
            key = key if isinstance(key, tuple) else (key,)
            ax.set_title(", ".join(f"{k}={v}" for k, v in zip(others, key)), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _variant_keys(records: Sequence[dict]) -> list[str]:
    """Grid keys besides depth, residual kind, seed and data split, in
    first-seen order."""
    return [k for k in _grid_keys(records) if k not in _GRID_FIXED]


def variant_label(residual: str, values: dict) -> str:
    """``wave`` or, with other grid keys, ``wave, force_scale=rezero, norm=pair``."""
    return ", ".join([str(residual), *(f"{k.split('.')[-1]}={v}" for k, v in values.items())])


def _variant_labels(agg: pd.DataFrame, others: Sequence[str]) -> list[str]:
    """:func:`variant_label` of every row of an :func:`aggregate` frame."""
    return [variant_label(r["residual"], {k: r[k] for k in others}) for _, r in agg.iterrows()]


def diagnostics_frame(records: Sequence[dict], depth: int) -> pd.DataFrame:
    """Long table (variant, residual, seed, measure, layer, value) of the cells
    of one depth; ``variant`` is the residual kind plus the values of the
    other grid keys (:func:`variant_label`)."""
    keys = _variant_keys(records)
    rows = []
    for rec in records:
        cfg = rec["config"]
        if _get(cfg, "model.num_layers") != depth:
            continue
        residual = _get(cfg, "model.residual")
        variant = variant_label(residual, {k: rec["params"].get(k, _get(cfg, k)) for k in keys})
        diags = (rec.get("metrics") or {}).get("diagnostics") or {}
        for name, values in diags.items():
            offset = 1 if name == "spectral_gap" else 0  # the gap of layer l acts on states l-1
            for i, v in enumerate(values):
                rows.append({"variant": variant, "residual": residual, "seed": _get(cfg, "train.seed"),
                             "hash": rec["hash"], "measure": name, "layer": i + offset,
                             "value": float("nan") if v is None else float(v)})
    return pd.DataFrame(rows)


def best_and_worst(df: pd.DataFrame, depth: int) -> list[str]:
    """The variants (:func:`variant_label`) with the highest and the lowest
    mean test score at ``depth``."""
    at = aggregate(df)
    at = at[at["depth"] == depth].dropna(subset=["mean"])
    if at.empty:
        raise ReportError(f"no scored cells at depth {depth}")
    labels = _variant_labels(at, other_keys(df))
    means = at["mean"].tolist()
    best = labels[max(range(len(means)), key=means.__getitem__)]
    worst = labels[min(range(len(means)), key=means.__getitem__)]
    return [best] if best == worst else [best, worst]


def plot_diagnostics(
    records: Sequence[dict], depth: int, path: Path, variants: Sequence[str] | None = None, title: str = ""
) -> Path | None:
    """Every diagnostic against the layer index for one depth, one line per
    variant (residual kind and the other grid values; mean over seeds, ±std
    band), only ``variants`` when given. ``None`` if no cell of that depth
    has diagnostics."""
    frame = diagnostics_frame(records, depth)
    if not frame.empty and variants is not None:
        frame = frame[frame["variant"].isin(list(variants))]
    if frame.empty:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measures = [m for m in DIAGNOSTICS if m in set(frame["measure"])]
    measures += sorted(set(frame["measure"]) - set(measures))
    cols = min(3, len(measures))
    rows = math.ceil(len(measures) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.4 * rows), squeeze=False)
    for ax, name in zip(axes.flat, measures):
        part = frame[frame["measure"] == name]
        log = name == "dirichlet_energy" and bool((part["value"] > 0).all())
        if variants is not None:
            order = list(variants)
        else:  # by residual kind (diffusion, wave, mix, light_wave), then by label
            kinds = _residual_order(part["residual"])
            residual_of = part.drop_duplicates("variant").set_index("variant")["residual"]
            order = sorted(residual_of.index, key=lambda v: (kinds.index(residual_of[v]), v))
        for name_v in order:
            sub = part[part["variant"] == name_v].groupby("layer")["value"].agg(["mean", "std"]).reset_index()
            if not sub.empty:
                _band(ax, sub["layer"], sub["mean"], sub["std"], name_v, positive=log)
        if log:
            ax.set_yscale("log")
        else:
            ax.ticklabel_format(axis="y", useOffset=False)
        ax.set_title(name.replace("_", " "), fontsize=10)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(measures):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"over-smoothing diagnostics per layer, {depth} layers{title}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


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
    target.mkdir(parents=True, exist_ok=True)
    records = load_cells(source)
    df = load_results(source, records)
    depths = sorted(df["depth"].unique())
    if depth is None:
        depth = int(depths[-1])
    elif depth not in depths:
        raise ReportError(f"--depth {depth}: the sweep has depths {', '.join(map(str, depths))}")
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
            variants=best_and_worst(df, depth), title=": best and worst test score")
    return paths


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``wavygraph report``."""
    p = subparsers.add_parser(
        "report",
        help="tables and plots of a sweep folder",
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
    paths = make_report(args.dir, args.depth, args.out, best_worst=args.best_worst)
    print(Path(paths["summary"]).read_text())
    for name, path in paths.items():
        if path is not None:
            print(f"{name}: {path}")
    return 0
