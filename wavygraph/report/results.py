"""Reading a sweep folder: the cell records, one row per cell, the mean and
std per variant and depth, and the per-layer diagnostics in long form."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from wavygraph.nn.steppers import STEPPERS
from wavygraph.sweep.store import CELL_FILE, read_cell, read_manifest

SCORE_COLUMNS = ("test", "best_val", "best_epoch", "epochs", "seconds", "num_params")
#: grid keys that repeat a run rather than vary the model: averaged over
REPEAT_KEYS = ("train.seed", "data.split")
#: grid keys with their own place in every table (depth, kind) or averaged over
GRID_FIXED = ("model.num_layers", "model.residual", *REPEAT_KEYS)


class ReportError(ValueError):
    """A folder that holds no sweep results, or a bad option."""


def get_dotted(tree: dict, dotted: str, default=None):
    """``tree["a"]["b"]`` for ``"a.b"``, or ``default`` when a level is missing."""
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
        records.append(read_cell(path))  # a corrupted cell.json: one line naming it
    return records


def expected_cells(out_dir: Path) -> int | None:
    """The number of cells of the sweep's grid (``sweep.json``), or ``None``."""
    manifest = read_manifest(out_dir)
    return None if manifest is None else len(manifest.get("cells", []))


def residual_order(values) -> list:
    """The distinct ``values``: registered residual kinds in registry order
    (diffusion, wave, mix, light_wave, ...), then the others sorted."""
    known = [r for r in STEPPERS if r in set(values)]
    return known + sorted(set(values) - set(known), key=str)


def grid_keys(records: Sequence[dict]) -> list[str]:
    """Every grid key of the cells, in first-seen order."""
    keys: list[str] = []
    for rec in records:
        keys += [k for k in rec["params"] if k not in keys]
    return keys


def _result_row(rec: dict, keys: Sequence[str]) -> dict:
    """One row of ``results.csv``: a cell's grid values, model, scores and
    the last layer's value of every diagnostic."""
    cfg, metrics = rec["config"], rec.get("metrics") or {}
    row = {"hash": rec["hash"]}
    for key in keys:
        row[key] = rec["params"].get(key, get_dotted(cfg, key))
    row["depth"] = get_dotted(cfg, "model.num_layers")
    arch = get_dotted(cfg, "model.arch", "wavy")  # a baseline (gcn, gcnii, ...) is its own column
    row["residual"] = get_dotted(cfg, "model.residual") if arch == "wavy" else arch
    row["seed"] = get_dotted(cfg, "train.seed")
    row["split"] = get_dotted(cfg, "data.split")
    row["dataset"] = get_dotted(cfg, "data.name")
    metric = metrics.get("metric")
    row["metric"] = metric if isinstance(metric, str) else "score"
    for col in SCORE_COLUMNS:
        row[col] = metrics.get(col)
    for name, values in (metrics.get("diagnostics") or {}).items():
        row[f"{name}_last"] = values[-1] if values else None
    return row


def load_results(out_dir: str | os.PathLike, records: Sequence[dict] | None = None) -> pd.DataFrame:
    """``results.csv`` as a data frame: one row per cell, sorted by the other
    grid keys, residual kind (in the order diffusion, wave, mix,
    light_wave), depth and seed. ``records``: the folder's cells when
    already read (:func:`load_cells`)."""
    if records is None:
        records = load_cells(out_dir)
    if not records:
        raise ReportError(f"{out_dir} holds no finished cells yet")
    keys = grid_keys(records)
    df = pd.DataFrame([_result_row(rec, keys) for rec in records])
    order = {r: i for i, r in enumerate(residual_order(df["residual"]))}
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
            "model.arch", *GRID_FIXED}
    return [c for c in df.columns if c not in skip and not c.endswith("_last")]


def percent_scale(df: pd.DataFrame) -> float:
    """100 when every test score lies in [0, 1] (shown in %), else 1."""
    scores = df["test"].dropna()
    return 100.0 if len(scores) > 0 and bool(((scores >= 0) & (scores <= 1)).all()) else 1.0


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample std and count of the test score per (other keys,
    residual, depth)."""
    keys = [*other_keys(df), "residual", "depth"]
    grouped = df.groupby(keys, sort=False, dropna=False)["test"]
    out = grouped.agg(mean="mean", std="std", n="count").reset_index()
    return out


def variant_label(residual: str, values: dict) -> str:
    """``wave`` or, with other grid keys, ``wave, force_scale=rezero, norm=pair``."""
    return ", ".join([str(residual), *(f"{k.split('.')[-1]}={v}" for k, v in values.items())])


def variant_labels(agg: pd.DataFrame, others: Sequence[str]) -> list[str]:
    """:func:`variant_label` of every row of an :func:`aggregate` frame."""
    return [variant_label(r["residual"], {k: r[k] for k in others}) for _, r in agg.iterrows()]


def best_and_worst(df: pd.DataFrame, depth: int) -> list[str]:
    """The variants (:func:`variant_label`) with the highest and the lowest
    mean test score at ``depth``."""
    at = aggregate(df)
    at = at[at["depth"] == depth].dropna(subset=["mean"])
    if at.empty:
        raise ReportError(f"no scored cells at depth {depth}")
    labels = variant_labels(at, other_keys(df))
    means = at["mean"].tolist()
    best = labels[max(range(len(means)), key=means.__getitem__)]
    worst = labels[min(range(len(means)), key=means.__getitem__)]
    return [best] if best == worst else [best, worst]


def diagnostics_frame(records: Sequence[dict], depth: int) -> pd.DataFrame:
    """Long table (variant, residual, seed, measure, layer, value) of the cells
    of one depth; ``variant`` is the residual kind plus the values of the
    other grid keys (:func:`variant_label`)."""
    keys = [k for k in grid_keys(records) if k not in GRID_FIXED]
    rows = []
    for rec in records:
        cfg = rec["config"]
        if get_dotted(cfg, "model.num_layers") != depth:
            continue
        residual = get_dotted(cfg, "model.residual")
        variant = variant_label(residual, {k: rec["params"].get(k, get_dotted(cfg, k)) for k in keys})
        diags = (rec.get("metrics") or {}).get("diagnostics") or {}
        for name, values in diags.items():
            offset = 1 if name == "spectral_gap" else 0  # the gap of layer l acts on states l-1
            for i, v in enumerate(values):
                rows.append({"variant": variant, "residual": residual, "seed": get_dotted(cfg, "train.seed"),
                             "hash": rec["hash"], "measure": name, "layer": i + offset,
                             "value": float("nan") if v is None else float(v)})
    return pd.DataFrame(rows)
