r"""Depth sweeps: grid expansion, a resumable lock-free result store, parallel
and sharded runs (``wavygraph sweep``).

A sweep file (paths of inputs relative to the sweep file)::

    base: ../cora.yaml            # a train config (optional: the defaults)
    grid:                         # the product of these lists is the set of cells
      model.num_layers: [2, 8, 32, 64]
      model.residual: [diffusion, wave, mix, light_wave]
      train.seed: [0, 1, 2]
    set:                          # fixed overrides for every cell (optional)
      train.epochs: 300
    out_dir: runs/cora_depth      # relative to the working directory

Every cell is one train run (:func:`wavygraph.train.run`) with the config
``base < set < the cell's grid values < command-line key=value``, in

    OUT/cells/<hash>/   config.yaml, metrics.json, model.pt, cell.json

where ``<hash>`` is a stable hash of the cell's resolved config (without the
keys that do not change the result, :data:`UNHASHED_KEYS`, and of options
added later while at their old behaviour, :data:`UNHASHED_AT`). A cell runs in ``OUT/tmp/`` and is
renamed into ``OUT/cells/`` in one :func:`os.rename` once complete, so a
cell is either complete or absent, whenever the process is killed. Rerunning
the same command skips the cells present; two processes (shards, machines
sharing a folder) never need a lock: shards take disjoint cells (every n-th
in hash order), and if two runs of one cell race, the first rename wins and
the second is dropped.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import socket
import sys
import time
import traceback
import uuid
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from hashlib import sha256
from importlib import import_module
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf

SWEEP_KEYS = ("base", "grid", "set", "out_dir")
#: Config keys left out of a cell's hash: they do not change its result
#: (beyond the rounding of float sums, for the device, thread count and step_impl).
UNHASHED_KEYS = (
    "out_dir", "data.root", "train.device", "train.progress", "train.num_threads",
    "train.checkpoint_every", "train.resume", "train.dist_backend", "model.step_impl",
)
#: Options added to the config after sweep folders existed, with the value
#: that reproduces the behaviour from before: left out of the hash while
#: they hold it, so adding an option does not invalidate finished cells.
#: Every new config key belongs here (or in :data:`UNHASHED_KEYS`).
UNHASHED_AT = {"train.distributed": False}
#: ``module:function`` of the train entry point; the environment variable
#: :data:`RUNNER_ENV` replaces it (tests use it for a fake trainer).
DEFAULT_RUNNER = "wavygraph.train:run"
RUNNER_ENV = "WAVYGRAPH_SWEEP_RUNNER"
CELL_FILE = "cell.json"


class SweepError(ValueError):
    """An invalid sweep file, override or command-line option."""


# ---------------------------------------------------------------------------
# sweep spec and grid expansion


@dataclass
class Sweep:
    """A parsed sweep: the base config, the grid, the fixed and command-line
    overrides, and the output folder."""

    base: str | None
    grid: dict[str, list]
    set: dict[str, Any] = field(default_factory=dict)
    out_dir: str | None = None
    overrides: list[str] = field(default_factory=list)
    source: str | None = None


@dataclass(frozen=True)
class Cell:
    """One grid point: its ``hash``, its grid values ``params`` and the
    resolved config as a plain container."""

    hash: str
    params: dict
    config: dict


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(_flatten(value, full))
        else:
            out[full] = value
    return out


def format_override(key: str, value: Any) -> str:
    """``key=value`` that OmegaConf's dotlist parses back to ``value``."""
    if isinstance(value, str):
        try:
            same = yaml.safe_load(value) == value
        except yaml.YAMLError:
            same = False
        text = value if same and value != "" else json.dumps(value)
    else:
        text = json.dumps(value)
    return f"{key}={text}"


def _parse_value(key: str, text: str) -> Any:
    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError as exc:
        raise SweepError(f"cannot parse the value of {key}: {str(exc).splitlines()[0]}") from None


def _check_grid_list(key: str, values: Any) -> list:
    if not isinstance(values, list) or not values:
        raise SweepError(f"grid.{key} must be a non-empty list, got {values!r}")
    for v in values:
        if isinstance(v, (dict, list)):
            raise SweepError(f"grid.{key} must hold plain values, got {v!r}")
    return values


def load_sweep(path: str, overrides: Sequence[str] = ()) -> Sweep:
    """Read a sweep file and apply command-line overrides.

    ``grid.KEY=[a,b]`` replaces (or adds) one grid list, ``out_dir=DIR`` the
    output folder, any other ``key=value`` applies to every cell. Setting a
    grid key directly is an error (use ``grid.KEY=[value]``).
    """
    if not os.path.isfile(path):
        raise SweepError(f"sweep file not found: {path}")
    try:
        with open(path) as fh:
            raw = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise SweepError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: the top level must be a mapping with keys {', '.join(SWEEP_KEYS)}")
    unknown = sorted(set(raw) - set(SWEEP_KEYS))
    if unknown:
        raise SweepError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; a sweep file has {', '.join(SWEEP_KEYS)}")
    here = os.path.dirname(os.path.abspath(path))
    base = raw.get("base")
    if base is not None:
        base = os.path.normpath(os.path.join(here, str(base)))
    grid_raw = raw.get("grid") or {}
    if not isinstance(grid_raw, dict):
        raise SweepError(f"{path}: grid must be a mapping of key: [values]")
    grid = {k: _check_grid_list(k, list(v) if isinstance(v, tuple) else v) for k, v in _flatten(grid_raw).items()}
    set_raw = raw.get("set") or {}
    if not isinstance(set_raw, dict):
        raise SweepError(f"{path}: set must be a mapping of key: value")
    sweep = Sweep(base=base, grid=grid, set=_flatten(set_raw), out_dir=raw.get("out_dir"), source=os.path.abspath(path))
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise SweepError(f"override {item!r} is not of the form key=value")
        key, text = item.split("=", 1)
        if key.startswith("grid."):
            value = _parse_value(key, text)
            sweep.grid[key[5:]] = _check_grid_list(key[5:], value if isinstance(value, list) else [value])
        elif key == "out_dir":
            sweep.out_dir = text
        else:
            sweep.overrides.append(item)
    for item in sweep.overrides:
        key = item.split("=", 1)[0]
        if key in sweep.grid:
            raise SweepError(f"{key} is a grid key; replace its list with grid.{key}=[...]")
    for key in sweep.set:
        if key in sweep.grid:
            raise SweepError(f"{key} is both in grid and in set")
    if not sweep.out_dir:
        raise SweepError("the sweep has no out_dir: set it in the file or pass out_dir=DIR")
    return sweep


def _drop(tree: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    for p in parents:
        tree = tree.get(p)
        if not isinstance(tree, dict):
            return
    tree.pop(last, None)


def cell_hash(config: dict) -> str:
    """Stable 16-hex-digit hash of a resolved config (a plain container),
    without :data:`UNHASHED_KEYS` and without the keys of
    :data:`UNHASHED_AT` that hold their listed value."""
    tree = json.loads(json.dumps(config))  # deep copy
    for key in UNHASHED_KEYS:
        _drop(tree, key)
    flat = _flatten(tree)
    for key, value in UNHASHED_AT.items():
        if key in flat and flat[key] == value:
            _drop(tree, key)
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    return sha256(text.encode()).hexdigest()[:16]


def expand(sweep: Sweep) -> list[Cell]:
    """Every cell of the grid (duplicates merged), sorted by hash."""
    from .config import load_config

    keys = list(sweep.grid)
    fixed = [format_override(k, v) for k, v in sweep.set.items()]
    cells: dict[str, Cell] = {}
    for values in itertools.product(*(sweep.grid[k] for k in keys)):
        params = dict(zip(keys, values))
        overrides = fixed + [format_override(k, v) for k, v in params.items()] + list(sweep.overrides)
        try:
            cfg = load_config(sweep.base, overrides)
        except ValueError as exc:
            where = ", ".join(f"{k}={v}" for k, v in params.items())
            raise SweepError(f"cell {where}: {exc}") from None
        config = OmegaConf.to_container(cfg, resolve=True)
        h = cell_hash(config)
        cells.setdefault(h, Cell(h, params, config))
    return [cells[h] for h in sorted(cells)]


def parse_shard(text: str | None) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n``; ``None`` -> ``(0, 1)``."""
    if text is None:
        return 0, 1
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise SweepError(f"--shard must look like I/N (e.g. 0/4), got {text!r}") from None
    if n < 1 or not 0 <= i < n:
        raise SweepError(f"--shard {text}: need N >= 1 and 0 <= I < N")
    return i, n


def shard(cells: Sequence[Cell], index: int, count: int) -> list[Cell]:
    """The ``index``-th of ``count`` disjoint parts: every ``count``-th cell in
    hash order, so the parts are the same in every process."""
    ordered = sorted(cells, key=lambda c: c.hash)
    return ordered[index::count]


# ---------------------------------------------------------------------------
# the result store


def cell_dir(out_dir: str | os.PathLike, h: str) -> Path:
    return Path(out_dir) / "cells" / h


def is_done(out_dir: str | os.PathLike, h: str) -> bool:
    return (cell_dir(out_dir, h) / CELL_FILE).is_file()


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(out_dir: str | os.PathLike, hashes: Sequence[str] | None = None) -> int:
    """Remove the temporary folders of this host's dead processes (and any of
    a cell already complete), optionally only of the given cells. Returns
    how many were removed."""
    tmp_root = Path(out_dir) / "tmp"
    if not tmp_root.is_dir():
        return 0
    host = socket.gethostname()
    wanted = None if hashes is None else set(hashes)
    removed = 0
    for entry in tmp_root.iterdir():
        parts = entry.name.split(".")
        if len(parts) < 4 or (wanted is not None and parts[0] not in wanted):
            continue
        h, token, pid = parts[0], ".".join(parts[1:-2]), parts[-2]
        stale = is_done(out_dir, h) or (token == host and pid.isdigit() and not _pid_alive(int(pid)))
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


def _resolve_runner(spec: str | None = None) -> Callable[[DictConfig], dict]:
    spec = spec or os.environ.get(RUNNER_ENV) or DEFAULT_RUNNER
    module, _, name = spec.partition(":")
    return getattr(import_module(module), name or "run")


def run_cell(cell: Cell, out_dir: str, device: str | None = None, runner: str | None = None) -> dict:
    """Run one cell into ``out_dir`` (unless present) and publish it
    atomically. Returns ``{"hash", "status", "seconds", "error"}`` with
    status ``done``, ``skipped``, ``duplicate`` (another process finished it
    first) or ``failed``."""
    from .config import load_config

    out_dir = os.path.abspath(out_dir)
    start = time.time()
    result = {"hash": cell.hash, "status": "skipped", "seconds": 0.0, "error": None}
    if is_done(out_dir, cell.hash):
        return result
    final = cell_dir(out_dir, cell.hash)
    tmp = Path(out_dir) / "tmp" / f"{cell.hash}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        cfg = OmegaConf.merge(load_config(None), cell.config)
        cfg.out_dir = str(tmp)
        cfg.train.progress = False
        if device is not None:
            cfg.train.device = device
        metrics = _resolve_runner(runner)(cfg)
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
        _write_json_atomic(tmp / CELL_FILE, record)
        try:
            os.rename(tmp, final)  # the completion: one atomic rename
            result["status"] = "done"
        except OSError:
            if not is_done(out_dir, cell.hash):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            result["status"] = "duplicate"
        failed = Path(out_dir) / "failed" / f"{cell.hash}.txt"
        if failed.exists():
            failed.unlink(missing_ok=True)
    except Exception as exc:  # one cell failing does not stop the sweep
        shutil.rmtree(tmp, ignore_errors=True)
        if is_done(out_dir, cell.hash):  # another process finished it (and may have cleaned our folder)
            result.update(status="duplicate", seconds=time.time() - start)
            return result
        (Path(out_dir) / "failed").mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "failed" / f"{cell.hash}.txt").write_text(
            json.dumps(cell.params) + "\n" + traceback.format_exc()
        )
        result.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    result["seconds"] = time.time() - start
    return result


_WORKER_DEVICE: str | None = None


def _exit_with_parent(parent: int) -> None:
    # a worker whose sweep process was killed (kill -9) stops instead of
    # lingering; its unfinished cell stays in tmp/ and is cleaned on the rerun
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _init_worker(queue, threads: int | None) -> None:
    global _WORKER_DEVICE
    import threading

    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    _WORKER_DEVICE = queue.get()
    if threads:
        import torch

        torch.set_num_threads(threads)


def _run_in_worker(cell: Cell, out_dir: str) -> dict:
    return run_cell(cell, out_dir, _WORKER_DEVICE)


def write_manifest(sweep: Sweep, cells: Sequence[Cell], out_dir: str) -> None:
    """``OUT/sweep.json``: the sweep's grid and every cell (hash, params),
    which :mod:`wavygraph.report` uses to count missing cells. Cells that
    earlier sweeps into the same folder listed are kept (a folder may hold
    several grids, e.g. a product plus extra variants)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    listed = {c.hash: {"hash": c.hash, "params": c.params} for c in cells}
    try:
        with open(Path(out_dir) / "sweep.json") as fh:
            earlier = json.load(fh).get("cells", [])
        for entry in earlier:
            if isinstance(entry, dict) and isinstance(entry.get("hash"), str):
                listed.setdefault(entry["hash"], entry)
    except (OSError, ValueError, AttributeError):
        pass  # none yet, or unreadable: this sweep's cells only
    _write_json_atomic(
        Path(out_dir) / "sweep.json",
        {
            "source": sweep.source,
            "base": sweep.base,
            "grid": sweep.grid,
            "set": sweep.set,
            "overrides": sweep.overrides,
            "cells": [listed[h] for h in sorted(listed)],
        },
    )


def run_sweep(
    sweep: Sweep,
    shard_index: int = 0,
    shard_count: int = 1,
    jobs: int = 1,
    devices: Sequence[str] | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> dict:
    """Run every missing cell of this shard; returns counts
    ``{"cells", "shard", "done", "skipped", "duplicate", "failed", "seconds"}``."""
    if jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {jobs}")
    devices = [d for d in (devices or []) if d]
    start = time.time()
    out_dir = os.path.abspath(sweep.out_dir)
    cells = expand(sweep)
    mine = shard(cells, shard_index, shard_count)
    write_manifest(sweep, cells, out_dir)
    clean_stale(out_dir, [c.hash for c in mine])
    todo = [c for c in mine if not is_done(out_dir, c.hash)]
    counts = {"cells": len(cells), "shard": len(mine), "done": 0, "skipped": len(mine) - len(todo),
              "duplicate": 0, "failed": 0}
    failures: list[str] = []

    from tqdm.auto import tqdm

    bar = tqdm(total=len(mine), initial=counts["skipped"], desc="cells", unit="cell",
               disable=not progress, file=sys.stderr, dynamic_ncols=True)

    def record(res: dict, cell: Cell) -> None:
        counts[res["status"]] = counts.get(res["status"], 0) + 1
        if res["status"] == "failed":
            failures.append(f"{cell.hash} {cell.params}: {res['error']}")
        bar.set_postfix_str(" ".join(f"{k.split('.')[-1]}={v}" for k, v in cell.params.items()), refresh=False)
        bar.update(1)

    try:
        if jobs == 1 or len(todo) <= 1:
            for cell in todo:
                record(run_cell(cell, out_dir, devices[0] if devices else None), cell)
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            for i in range(jobs):
                queue.put(devices[i % len(devices)] if devices else None)
            on_cpu = not devices or all(d.startswith("cpu") for d in devices)
            threads = max(1, (os.cpu_count() or 1) // jobs) if on_cpu else None
            with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx,
                                     initializer=_init_worker, initargs=(queue, threads)) as pool:
                pending = {pool.submit(_run_in_worker, c, out_dir): c for c in todo}
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        cell = pending.pop(fut)
                        try:
                            res = fut.result()
                        except Exception as exc:  # a worker died
                            res = {"hash": cell.hash, "status": "failed", "seconds": 0.0,
                                   "error": f"{type(exc).__name__}: {exc}"}
                        record(res, cell)
    finally:
        bar.close()
    counts["seconds"] = time.time() - start
    part = f" (shard {shard_index}/{shard_count}: {len(mine)} cells)" if shard_count > 1 else ""
    log(
        f"sweep {sweep.out_dir}: {len(cells)} cells{part}; ran {counts['done']}, "
        f"already done {counts['skipped']}, failed {counts['failed']}"
        + (f", finished elsewhere {counts['duplicate']}" if counts["duplicate"] else "")
        + f"; {counts['seconds']:.1f}s"
    )
    for line in failures:
        log(f"  failed: {line} (traceback in {os.path.join(sweep.out_dir, 'failed')})")
    present = sum(is_done(out_dir, c.hash) for c in cells)
    log(f"{present}/{len(cells)} cells of the grid present in {sweep.out_dir}")
    if present:
        try:
            from .report import load_results, summary_table

            log(summary_table(load_results(out_dir)))
        except Exception as exc:  # the summary is a courtesy; the results are on disk
            log(f"(no summary: {type(exc).__name__}: {exc})")
    log(f"report: wavygraph report {sweep.out_dir}")
    return counts


# ---------------------------------------------------------------------------
# command line


def _add_options(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    d = (lambda v: v) if defaults else (lambda v: argparse.SUPPRESS)
    p.add_argument("--shard", metavar="I/N", default=d(None),
                   help="run only the I-th of N disjoint parts (0-based; e.g. $SLURM_ARRAY_TASK_ID/N)")
    p.add_argument("--jobs", type=int, default=d(1), metavar="K", help="cells at once on this machine (default 1)")
    p.add_argument("--devices", default=d(None), metavar="D1,D2",
                   help="comma-separated devices the jobs are spread over (e.g. cuda:0,cuda:1)")
    p.add_argument("--dry-run", action="store_true", default=d(False), help="list the cells of this shard and exit")
    p.add_argument("--no-progress", action="store_true", default=d(False), help="no progress bar")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``wavygraph sweep``."""
    p = subparsers.add_parser(
        "sweep",
        help="run a grid of train runs (resumable, shardable, parallel)",
        description=(
            "Run every cell of a sweep file as a train run into OUT/cells/<hash>/. "
            "Rerunning the same command skips finished cells. key=value applies to "
            "every cell, grid.KEY=[a,b] replaces one grid list, out_dir=DIR the output folder. "
            "Options and key=value may come in any order after SWEEP_FILE."
        ),
    )
    p.add_argument("sweep_file", help="sweep YAML (base, grid, set, out_dir)")
    # key=value overrides mixed with options: collected here, split in command()
    p.add_argument("overrides", nargs=argparse.REMAINDER, metavar="key=value", help="overrides (see above)")
    _add_options(p)
    p.set_defaults(func=command)
    return p


def _split_rest(args: argparse.Namespace) -> argparse.Namespace:
    """Parse options that came after SWEEP_FILE (argparse leaves them in the
    overrides with the key=value items)."""
    inner = argparse.ArgumentParser(prog="wavygraph sweep", add_help=False)
    inner.add_argument("overrides", nargs="*")
    _add_options(inner, defaults=False)
    rest = inner.parse_intermixed_args(list(args.overrides or []))
    merged = vars(args).copy()
    merged.update(vars(rest))
    return argparse.Namespace(**merged)


def command(args: argparse.Namespace) -> int:
    args = _split_rest(args)
    sweep = load_sweep(args.sweep_file, args.overrides)
    index, count = parse_shard(args.shard)
    devices = args.devices.split(",") if args.devices else None
    if args.dry_run:
        cells = expand(sweep)
        mine = shard(cells, index, count)
        for c in mine:
            state = "done" if is_done(sweep.out_dir, c.hash) else "todo"
            print(c.hash, state, " ".join(f"{k}={v}" for k, v in c.params.items()))
        print(f"{len(mine)} of {len(cells)} cells in this shard")
        return 0
    counts = run_sweep(sweep, index, count, args.jobs, devices, progress=not args.no_progress)
    return 1 if counts["failed"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m wavygraph.sweep ...``: the same as ``wavygraph sweep ...``."""
    parser = argparse.ArgumentParser(prog="wavygraph")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["sweep", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"wavygraph: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
