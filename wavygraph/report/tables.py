"""The markdown tables of a sweep: test score mean ± std (runs) per residual
kind and depth (``summary_table``), every variant against depth
(``variant_table``), and ``summary.md``."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .results import aggregate, expected_cells, other_keys, percent_scale, residual_order, variant_labels


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
    scale = percent_scale(df)
    agg = aggregate(df)
    residuals = residual_order(agg["residual"])
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
    the other grid keys, :func:`~.results.variant_label`) against depth:
    mean ± std (runs), the best per depth in bold."""
    scale = percent_scale(df)
    agg = aggregate(df)
    others = other_keys(df)
    order = {r: i for i, r in enumerate(residual_order(agg["residual"]))}
    agg = agg.assign(variant=variant_labels(agg, others), _r=agg["residual"].map(order))
    depths = sorted(agg["depth"].unique())
    best = agg.groupby("depth")["mean"].max()
    lines = ["| variant | " + " | ".join(f"{d} layers" for d in depths) + " |",
             "|---|" + "---:|" * len(depths)]
    for variant, part in agg.sort_values(["_r", *others], kind="stable").groupby("variant", sort=False):
        at = part.set_index("depth")
        cells = [_score_cell(at, d, scale, best[d]) for d in depths]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_summary(df: pd.DataFrame, out_dir: Path, source: Path) -> Path:
    """``out_dir/summary.md``: the data sets, the number of cells (of the
    grid's, from ``source/sweep.json``), :func:`summary_table` and, with
    other grid keys, :func:`variant_table`."""
    expected = expected_cells(source)
    count = f"{len(df)} cells" + (f" of {expected}" if expected is not None else "")
    datasets = ", ".join(sorted(set(map(str, df["dataset"]))))
    text = f"# Sweep results\n\ndata: {datasets}; {count}\n\n" + summary_table(df)
    if other_keys(df):
        text += "\n## Every variant against depth\n\n" + variant_table(df)
    path = out_dir / "summary.md"
    path.write_text(text)
    return path
