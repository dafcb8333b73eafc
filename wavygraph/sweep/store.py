"""The result store of a sweep folder ``OUT``:

* ``OUT/cells/<hash>/``: one complete cell (``config.yaml``,
  ``metrics.json``, ``model.pt``, ``cell.json``); a cell is published by one
  :func:`os.rename` of its temporary folder, so it is complete or absent;
* ``OUT/tmp/<hash>.<host>.<pid>.<token>/``: a cell being run;
* ``OUT/failed/<hash>.txt``: the grid values and traceback of a failed cell;
* ``OUT/sweep.json``: the manifest (grid and every cell's hash and params).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import time
import traceback
from importlib import import_module
from pathlib import Path
from typing import Callable, Sequence

from omegaconf import DictConfig, OmegaConf

from wavygraph.folders import CELL_FILE, read_cell, read_manifest, temp_dir, temp_dirs
from wavygraph.utils import atomic_write_json, publish_dir

from .spec import Cell, Sweep, SweepError

#: ``module:function`` of the train entry point (one that writes straight into
#: the cell's temporary folder, which the sweep publishes); the environment variable
#: :data:`RUNNER_ENV` replaces it (tests use it for a fake trainer).
DEFAULT_RUNNER = "wavygraph.train.loop:run_in_place"
RUNNER_ENV = "WAVYGRAPH_SWEEP_RUNNER"


def cell_dir(out_dir: str | os.PathLike, h: str) -> Path:
    return Path(out_dir) / "cells" / h


def is_done(out_dir: str | os.PathLike, h: str) -> bool:
    return (cell_dir(out_dir, h) / CELL_FILE).is_file()


def clean_stale(out_dir: str | os.PathLike, hashes: Sequence[str] | None = None) -> int:
    """Remove the temporary folders of this host's dead processes (and any of
    a cell already complete), optionally only of the given cells. Returns
    how many were removed."""
    wanted = None if hashes is None else set(hashes)
    removed = 0
    for entry, h, dead in temp_dirs(out_dir):
        if (wanted is None or h in wanted) and (dead or is_done(out_dir, h)):
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


def resolve_runner(spec: str | None = None) -> Callable[[DictConfig], dict]:
    """The train function named by ``spec``, :data:`RUNNER_ENV` or :data:`DEFAULT_RUNNER`."""
    spec = spec or os.environ.get(RUNNER_ENV) or DEFAULT_RUNNER
    module, _, name = spec.partition(":")
    return getattr(import_module(module), name or "run")


def _train(cell: Cell, tmp: Path, final: Path, device: str | None, runner: str | None) -> dict:
    """Run the cell's config into ``tmp`` and write its ``cell.json`` there."""
    from wavygraph.config import load_config
    from wavygraph.fingerprint import changed_files, data_fingerprint

    if cell.fingerprint and changed_files(cell.fingerprint, data_fingerprint(cell.config.get("data"))):
        raise ValueError("the graph file changed since the sweep started; rerun the sweep to run its new cells")
    cfg = OmegaConf.merge(load_config(None), cell.config)
    cfg.out_dir = str(tmp)
    cfg.train.progress = False
    if device is not None:
        cfg.train.device = device
    metrics = resolve_runner(runner)(cfg)
    tmp.mkdir(parents=True, exist_ok=True)
    cfg.out_dir = str(final)
    if (tmp / "config.yaml").exists():  # name the final folder, not the temporary one
        (tmp / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    record = {
        "hash": cell.hash,
        "params": cell.params,
        "config": {**cell.config, "out_dir": str(final)},
        "metrics": metrics,
        "host": socket.gethostname(),
        "device": cfg.train.device,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    if cell.fingerprint:
        record["data_fingerprint"] = cell.fingerprint
    atomic_write_json(tmp / CELL_FILE, record, sort_keys=True)
    return metrics


def _publish(tmp: Path, final: Path, out_dir: str, h: str) -> str:
    """Rename ``tmp`` to ``final``: ``done``, or ``duplicate`` when another
    process published the cell first."""
    try:
        publish_dir(tmp, final)  # the completion: one atomic rename
        status = "done"
    except OSError:
        if not is_done(out_dir, h):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        status = "duplicate"
    (Path(out_dir) / "failed" / f"{h}.txt").unlink(missing_ok=True)
    return status


def _record_failure(cell: Cell, out_dir: str) -> None:
    (Path(out_dir) / "failed").mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "failed" / f"{cell.hash}.txt").write_text(json.dumps(cell.params) + "\n" + traceback.format_exc())


def run_cell(cell: Cell, out_dir: str, device: str | None = None, runner: str | None = None) -> dict:
    """Run one cell into ``out_dir`` (unless present) and publish it
    atomically. Returns ``{"hash", "status", "seconds", "error"}`` with
    status ``done``, ``skipped``, ``duplicate`` (another process finished it
    first) or ``failed``."""
    out_dir = os.path.abspath(out_dir)
    start = time.time()
    result = {"hash": cell.hash, "status": "skipped", "seconds": 0.0, "error": None}
    if is_done(out_dir, cell.hash):
        return result
    final = cell_dir(out_dir, cell.hash)
    tmp = temp_dir(out_dir, cell.hash)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        _train(cell, tmp, final, device, runner)
        result["status"] = _publish(tmp, final, out_dir, cell.hash)
    except Exception as exc:  # one cell failing does not stop the sweep
        shutil.rmtree(tmp, ignore_errors=True)
        if is_done(out_dir, cell.hash):  # another process finished it (and may have cleaned our folder)
            result["status"] = "duplicate"
        else:
            _record_failure(cell, out_dir)
            result.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    result["seconds"] = time.time() - start
    return result


def write_manifest(sweep: Sweep, cells: Sequence[Cell], out_dir: str) -> None:
    """``OUT/sweep.json``: the sweep's grid and every cell (hash, params),
    which :mod:`wavygraph.report` uses to count missing cells. Cells that
    earlier sweeps into the same folder listed are kept (a folder may hold
    several grids, e.g. a product plus extra variants)."""
    listed = {c.hash: {"hash": c.hash, "params": c.params} for c in cells}
    earlier = read_manifest(out_dir) or {}  # a corrupted one stops the sweep before anything is written
    for entry in earlier.get("cells", []):
        if isinstance(entry, dict) and isinstance(entry.get("hash"), str):
            listed.setdefault(entry["hash"], entry)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    manifest = {
        "source": sweep.source,
        "base": sweep.base,
        "grid": sweep.grid,
        "set": sweep.set,
        "overrides": sweep.overrides,
        "cells": [listed[h] for h in sorted(listed)],
    }
    atomic_write_json(Path(out_dir) / "sweep.json", manifest, sort_keys=True)
