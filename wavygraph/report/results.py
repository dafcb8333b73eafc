"""Reading a sweep folder: the cell records, one row per cell, the mean and
std per variant and depth, and the per-layer diagnostics in long form.

Tables never mix models: cells are averaged only when their resolved
configs (the part a cell's hash covers, :func:`~wavygraph.keys.hashed_config`,
and the fingerprint of a graph file) differ in :data:`REPEAT_KEYS` alone.
Every other key whose value differs between the cells of the folder (two
sweeps with different ``set:`` into one folder, say) gets its own column
and splits the tables, as a grid key does (:func:`model_keys`)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from wavygraph.config import model_label
from wavygraph.folders import CELL_FILE, read_cell, read_manifest
from wavygraph.keys import NEUTRAL_KEYS, Added, hashed_config
from wavygraph.nn.steppers import STEPPERS
from wavygraph.utils import flatten

SCORE_COLUMNS = ("test", "best_val", "best_epoch", "epochs", "seconds", "num_params")
#: grid keys that repeat a run rather than vary the model: averaged over
REPEAT_KEYS = ("train.seed", "data.split")
#: grid keys with their own place in every table (depth, kind) or averaged over
GRID_FIXED = ("model.num_layers", "model.residual", *REPEAT_KEYS)
#: config keys shown by the ``depth`` and ``residual`` columns (a baseline's arch names its column)
SHOWN_KEYS = ("model.num_layers", "model.residual", "model.arch")


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


def model_tree(rec: dict) -> dict[str, str]:
    """What a cell's model is: its hashed config (flat, values as JSON text)
    without :data:`REPEAT_KEYS`, and ``data.<file>_sha256`` for each graph
    file it read (the start of the file's SHA-256)."""
    flat = flatten(hashed_config(rec.get("config") or {}))
    tree = {k: json.dumps(v, sort_keys=True) for k, v in flat.items() if k not in REPEAT_KEYS}
    for name, fp in (rec.get("data_fingerprint") or {}).items():
        if isinstance(fp, dict) and isinstance(fp.get("sha256"), str):
            tree[f"data.{name}_sha256"] = fp["sha256"][:12]
    return tree


def model_keys(records: Sequence[dict]) -> list[str]:
    """The keys of :func:`model_tree` whose values differ between the cells
    (a key a cell lacks holds its value from before the key existed), in
    first-seen order."""
    trees = [model_tree(rec) for rec in records]
    keys: list[str] = []
    for tree in trees:
        keys += [k for k in tree if k not in keys]
    return [k for k in keys if len({tree.get(k) for tree in trees}) > 1]


def _display(rec: dict, key: str):
    """A cell's value of ``key`` as a table shows it (text for a list)."""
    if key.endswith("_sha256") and key.startswith("data."):
        return model_tree(rec).get(key)
    kind = NEUTRAL_KEYS.get(key)
    value = get_dotted(rec["config"], key, kind.value if isinstance(kind, Added) else None)
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def _label(rec: dict, with_residual: bool) -> str:
    """The ``residual`` column: :func:`~wavygraph.config.model_label` (a
    baseline's arch is its own column), with the baseline's
    ``model.residual`` where that differs between cells of one arch."""
    model = rec["config"].get("model") or {}
    label = model_label(model)
    if model.get("arch", "wavy") == "wavy" or not with_residual:
        return label
    return f"{label} (residual={model.get('residual')})"


def _baseline_residual_differs(records: Sequence[dict]) -> bool:
    """Whether cells of one baseline arch differ in ``model.residual``."""
    seen: dict = {}
    for rec in records:
        arch = get_dotted(rec["config"], "model.arch", "wavy")
        if arch != "wavy":
            seen.setdefault(arch, set()).add(str(get_dotted(rec["config"], "model.residual")))
    return any(len(v) > 1 for v in seen.values())


def _result_row(rec: dict, keys: Sequence[str], with_residual: bool = False) -> dict:
    """One row of ``results.csv``: a cell's grid values (and the values of
    the other keys that tell its model apart), model, scores and the last
    layer's value of every diagnostic."""
    cfg, metrics = rec["config"], rec.get("metrics") or {}
    row = {"hash": rec["hash"]}
    for key in keys:
        row[key] = rec["params"][key] if key in rec["params"] else _display(rec, key)
    row["depth"] = get_dotted(cfg, "model.num_layers")
    row["residual"] = _label(rec, with_residual)
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
    keys = variant_columns(records)
    with_residual = _baseline_residual_differs(records)
    df = pd.DataFrame([_result_row(rec, keys, with_residual) for rec in records])
    order = {r: i for i, r in enumerate(residual_order(df["residual"]))}
    others = other_keys(df)
    df["_r"] = df["residual"].map(order)
    df = df.sort_values([*others, "_r", "depth", "seed", "split", "hash"], kind="stable").drop(columns="_r")
    return df.reset_index(drop=True)


def variant_columns(records: Sequence[dict]) -> list[str]:
    """The grid keys, then the other :func:`model_keys` (not depth, kind or
    arch): the columns of ``results.csv`` that tell models apart."""
    keys = grid_keys(records)
    return keys + [k for k in model_keys(records) if k not in keys and k not in SHOWN_KEYS]


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
    keys = [k for k in variant_columns(records) if k not in GRID_FIXED]
    with_residual = _baseline_residual_differs(records)
    rows = []
    for rec in records:
        cfg = rec["config"]
        if get_dotted(cfg, "model.num_layers") != depth:
            continue
        residual = _label(rec, with_residual)
        values = {k: rec["params"][k] if k in rec["params"] else _display(rec, k) for k in keys}
        variant = variant_label(residual, values)
        diags = (rec.get("metrics") or {}).get("diagnostics") or {}
        for name, values in diags.items():
            offset = 1 if name == "spectral_gap" else 0  # the gap of layer l acts on states l-1
            for i, v in enumerate(values):
                rows.append({"variant": variant, "residual": residual, "seed": get_dotted(cfg, "train.seed"),
                             "hash": rec["hash"], "measure": name, "layer": i + offset,
                             "value": float("nan") if v is None else float(v)})
    return pd.DataFrame(rows)
