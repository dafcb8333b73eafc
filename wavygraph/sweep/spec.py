"""Sweep files and grid expansion: :func:`load_sweep` reads a sweep file and
the command-line overrides, :func:`expand` turns it into :class:`Cell` s
(one resolved train config each, named by :func:`cell_hash`), and
:func:`shard_cells` gives the cells of one shard (``--shard I/N``, read by
:func:`parse_shard`): the grid splits into disjoint shards."""
from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any, Sequence

import yaml
from omegaconf import OmegaConf

from wavygraph.fingerprint import content_of, data_fingerprint
from wavygraph.keys import hashed_config
from wavygraph.utils import flatten, folder_problem, read_yaml

SWEEP_KEYS = ("base", "grid", "set", "out_dir")


class SweepError(ValueError):
    """An invalid sweep file, override or command-line option."""


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
    """One grid point: its ``hash``, its grid values ``params``, the
    resolved config as a plain container and, for a graph file, the files'
    ``fingerprint`` (:func:`~wavygraph.fingerprint.data_fingerprint`)."""

    hash: str
    params: dict
    config: dict
    fingerprint: dict | None = None


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


def _read_file(path: str) -> Sweep:
    """The sweep file alone (no overrides)."""
    raw = read_yaml(path, "sweep file", SweepError)
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
    grid = {k: _check_grid_list(k, list(v) if isinstance(v, tuple) else v) for k, v in flatten(grid_raw).items()}
    set_raw = raw.get("set") or {}
    if not isinstance(set_raw, dict):
        raise SweepError(f"{path}: set must be a mapping of key: value")
    return Sweep(base=base, grid=grid, set=flatten(set_raw), out_dir=raw.get("out_dir"), source=os.path.abspath(path))


def _apply_overrides(sweep: Sweep, overrides: Sequence[str]) -> None:
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


def load_sweep(path: str, overrides: Sequence[str] = ()) -> Sweep:
    """Read a sweep file and apply command-line overrides.

    ``grid.KEY=[a,b]`` replaces (or adds) one grid list, ``out_dir=DIR`` the
    output folder, any other ``key=value`` applies to every cell. Setting a
    grid key directly is an error (use ``grid.KEY=[value]``).
    """
    sweep = _read_file(path)
    _apply_overrides(sweep, overrides)
    for item in sweep.overrides:
        key = item.split("=", 1)[0]
        if key in sweep.grid:
            raise SweepError(f"{key} is a grid key; replace its list with grid.{key}=[...]")
    for key in sweep.set:
        if key in sweep.grid:
            raise SweepError(f"{key} is both in grid and in set")
    if not sweep.out_dir:
        raise SweepError("the sweep has no out_dir: set it in the file or pass out_dir=DIR")
    problem = folder_problem(sweep.out_dir, "out_dir")  # a file, under a file, not writable
    if problem:
        raise SweepError(problem)
    held = [f for f in ("tune.json", "metrics.json", "model.pt", "checkpoint.pt")
            if os.path.isfile(os.path.join(sweep.out_dir, f))]
    if held:  # its cells would be mixed into another command's folder
        what = "a tune study" if held[0] == "tune.json" else "a train run"
        raise SweepError(f"out_dir={sweep.out_dir} holds {what} ({held[0]}), not a sweep; choose another out_dir")
    return sweep


def cell_hash(config: dict, fingerprint: dict | None = None) -> str:
    """Stable 16-hex-digit hash of a resolved config (a plain container):
    of its :func:`hashed_config` and, for a graph file, of the content of
    the files (``fingerprint``, :func:`~wavygraph.fingerprint.data_fingerprint`),
    so that a changed file gives new cells."""
    tree = hashed_config(config)
    if fingerprint:
        tree["data_fingerprint"] = content_of(fingerprint)
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    return sha256(text.encode()).hexdigest()[:16]


def expand(sweep: Sweep) -> list[Cell]:
    """Every cell of the grid (duplicates merged), sorted by hash."""
    from wavygraph.config import load_config

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
        fingerprint = data_fingerprint(config.get("data"))  # None unless data.path names a graph file
        h = cell_hash(config, fingerprint)
        cells.setdefault(h, Cell(h, params, config, fingerprint))
    return [cells[h] for h in sorted(cells)]


def parse_shard(text: str | None) -> tuple[int, int]:
    """``--shard "i/n"`` -> ``(i, n)``, shard ``i`` of ``n`` with
    ``0 <= i < n``; ``None`` -> ``(0, 1)``."""
    if text is None:
        return 0, 1
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise SweepError(f"--shard must look like I/N (e.g. 0/4), got {text!r}") from None
    if n < 1 or not 0 <= i < n:
        raise SweepError(f"--shard {text}: need N >= 1 and 0 <= I < N")
    return i, n


def shard_cells(cells: Sequence[Cell], index: int, count: int) -> list[Cell]:
    """The cells of shard ``index`` of ``count`` disjoint shards: every
    ``count``-th cell in hash order, so the shards are the same in every
    process."""
    ordered = sorted(cells, key=lambda c: c.hash)
    return ordered[index::count]
