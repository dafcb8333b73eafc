"""The plots of a sweep (matplotlib, Agg backend): test score against depth,
and every diagnostic against the layer index at one depth."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from wavygraph.diagnostics import MEASURES as DIAGNOSTICS

from .results import aggregate, diagnostics_frame, other_keys, percent_scale, residual_order


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _band(ax, x, mean, std, label, positive: bool = False):
    line, = ax.plot(x, mean, marker="o", ms=3, label=label)
    lo, hi = mean - std.fillna(0.0), mean + std.fillna(0.0)
    if positive:  # log axis: keep the band above 0 (at most a factor 10 below the mean)
        lo = lo.where(lo > mean / 10, mean / 10)
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)


def plot_score_vs_depth(df: pd.DataFrame, path: Path) -> Path:
    """Test score against depth per residual kind (log2 depth axis)."""
    plt = _pyplot()
    scale = percent_scale(df)
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
        for r in residual_order(part["residual"]):
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


def _line_order(part: pd.DataFrame, variants: Sequence[str] | None) -> list[str]:
    """``variants`` as given, else by residual kind (diffusion, wave, mix,
    light_wave), then by label."""
    if variants is not None:
        return list(variants)
    kinds = residual_order(part["residual"])
    residual_of = part.drop_duplicates("variant").set_index("variant")["residual"]
    return sorted(residual_of.index, key=lambda v: (kinds.index(residual_of[v]), v))


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
    plt = _pyplot()
    measures = [m for m in DIAGNOSTICS if m in set(frame["measure"])]
    measures += sorted(set(frame["measure"]) - set(measures))
    cols = min(3, len(measures))
    rows = math.ceil(len(measures) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.4 * rows), squeeze=False)
    for ax, name in zip(axes.flat, measures):
        part = frame[frame["measure"] == name]
        log = name == "dirichlet_energy" and bool((part["value"] > 0).all())
        for name_v in _line_order(part, variants):
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
