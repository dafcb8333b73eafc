"""Search spaces: a YAML file that maps config keys to distributions.

    train.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
    model.hidden_channels: {type: int, low: 32, high: 128, step: 32}
    model.residual: {type: categorical, choices: [diffusion, light_wave]}
    model.arch: gcn                # a plain value: fixed in every trial

Keys are dotted config keys (or nested mappings of them); a distribution is
a mapping with a ``type``: ``float`` (``low``, ``high``, optional ``log`` or
``step``), ``int`` (``low``, ``high``, optional ``log`` or ``step``) or
``categorical`` (``choices``: plain values). Any other value is fixed.

The one top-level key that is not a config key, ``starts``, lists known
good points of the space (mappings of searched keys to values inside their
distributions): a new study runs them as its first trials, in order, the
searched keys a start leaves out drawn by the sampler, so that a small budget
begins from configs that held elsewhere instead of from random draws. The
entry ``base`` stands for the base config's own point: each searched key at
the base config's value, a number outside its range taken at the nearest end
(on the step's grid), a value outside a categorical's choices left to the
sampler; a start that repeats an earlier one is dropped, so a base config
that is one of the listed starts runs once.

:func:`load_space` checks the file against the config schema before anything
runs: an unknown key, a distribution the key's type cannot take (a float for
an int key, a string choice for a float key, ...), empty choices, ``low >
high``, ``log`` with ``low <= 0``, and every endpoint and choice is run
through :func:`wavygraph.config.load_config` on the base config, so a value
the config would reject (``model.dropout`` of 1.0, an unknown residual kind)
is an error naming the key before the first trial.
"""
from __future__ import annotations

import json
import os
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Sequence

from wavygraph.config import Config, ConfigError, load_config
from wavygraph.utils import read_yaml

DIST_TYPES = ("float", "int", "categorical")
#: the top-level key of a space file that lists its starting points (not a config key)
STARTS = "starts"
#: the start that stands for the base config's own values of the searched keys
BASE = "base"
_DIST_FIELDS = {"float": {"low", "high", "log", "step"}, "int": {"low", "high", "log", "step"},
                "categorical": {"choices"}}
#: keys a trial's run sets itself (where it writes, on which device, ...)
UNSEARCHABLE = ("out_dir", "imports", "train.device", "train.progress", "train.resume", "train.checkpoint_every",
                "train.distributed", "train.dist_backend")


class SpaceError(ConfigError):
    """An invalid search space or tune option (one line, exit 2)."""


@dataclass
class Space:
    """A parsed search space.

    Args:
        path (str): the YAML file.
        params (dict): ``{config key: {"type", "low", "high", "log", "step"}
            or {"type", "choices"}}``, in file order.
        fixed (dict): ``{config key: value}`` set in every trial.
        starts (list): ``[{searched key: value}]``, the first trials of a
            new study (see the module); after :func:`parse_space` it may hold
            :data:`BASE`, which :func:`load_space` replaces by the base
            config's point.
    """

    path: str
    params: dict
    fixed: dict
    starts: list = field(default_factory=list)  # [{searched key: value}], the first trials of a new study

    def distributions(self) -> dict:
        """The Optuna distributions of :attr:`params`, by key."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        out = {}
        for key, d in self.params.items():
            if d["type"] == "categorical":
                out[key] = CategoricalDistribution(d["choices"])
            elif d["type"] == "float":
                out[key] = FloatDistribution(d["low"], d["high"], log=d.get("log", False), step=d.get("step"))
            else:
                out[key] = IntDistribution(d["low"], d["high"], log=d.get("log", False), step=d.get("step") or 1)
        return out

    def fixed_overrides(self) -> list[str]:
        return [override(k, v) for k, v in self.fixed.items()]


def override(key: str, value: Any) -> str:
    """``key=value`` that OmegaConf's dotlist reads back as ``value``."""
    return f"{key}={json.dumps(value)}"


def key_type(key: str) -> tuple[Any, bool]:
    """``(type, optional)`` of a dotted config key from the schema's
    dataclasses (``Any`` under a mapping key such as
    ``model.residual_options``); raises :class:`SpaceError` if unknown."""
    node, parts = Config, key.split(".")
    for i, part in enumerate(parts):
        names = {f.name for f in fields(node)}
        if part not in names:
            raise SpaceError(f"unknown config key {key!r} in the space")
        hint = typing.get_type_hints(node)[part]
        optional = typing.get_origin(hint) is typing.Union and type(None) in typing.get_args(hint)
        if optional:
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if is_dataclass(hint):
            node = hint
            continue
        if typing.get_origin(hint) in (dict, typing.Dict) and i == len(parts) - 2:
            return Any, True
        if i != len(parts) - 1:
            raise SpaceError(f"unknown config key {key!r} in the space")
        return hint, optional
    raise SpaceError(f"{key} is a section of the config, not a key; name one of its keys")


def _flatten(tree: dict, prefix: str = "") -> dict:
    """Dotted keys down to distributions (mappings with a ``type``) and plain values."""
    out = {}
    for k, v in tree.items():
        full = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and "type" not in v:
            out.update(_flatten(v, full))
        else:
            out[full] = v
    return out


def _number(key: str, name: str, value: Any, integer: bool) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool):
        raise SpaceError(f"{key}: {name} must be {'an integer' if integer else 'a number'}, got {value!r}")


def _check_range(key: str, d: dict) -> None:
    integer = d["type"] == "int"
    for name in ("low", "high"):
        if name not in d:
            raise SpaceError(f"{key}: a {d['type']} distribution needs low and high")
        _number(key, name, d[name], integer)
    if d["low"] > d["high"]:
        raise SpaceError(f"{key}: low={d['low']} > high={d['high']}; swap them")
    if not isinstance(d.get("log", False), bool):
        raise SpaceError(f"{key}: log must be true or false, got {d['log']!r}")
    if d.get("log") and d["low"] <= 0:
        raise SpaceError(f"{key}: log=true needs low > 0, got low={d['low']}")
    if d.get("step") is not None:
        _number(key, "step", d["step"], integer)
        if d["step"] <= 0:
            raise SpaceError(f"{key}: step must be > 0, got {d['step']}")
        if d.get("log"):
            raise SpaceError(f"{key}: step and log=true cannot be combined; drop one")


def _takes(kind: Any, optional: bool, value: Any) -> bool:
    """Whether a key of type ``kind`` can hold ``value``."""
    if value is None:
        return optional
    if kind is Any:
        return isinstance(value, (bool, int, float, str))
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind is int:
        return isinstance(value, int)
    if kind is float:
        return isinstance(value, (int, float))
    return kind is str and isinstance(value, str)


def _check_distribution(key: str, d: dict) -> dict:
    kind, optional = key_type(key)
    if key in UNSEARCHABLE:
        raise SpaceError(f"{key} is set by wavygraph tune itself and cannot be searched; remove it from the space")
    dtype = d.get("type")
    if dtype not in DIST_TYPES:
        raise SpaceError(f"{key}: type must be one of {', '.join(DIST_TYPES)}, got {dtype!r}")
    unknown = sorted(set(d) - _DIST_FIELDS[dtype] - {"type"})
    if unknown:
        raise SpaceError(f"{key}: a {dtype} distribution takes {', '.join(sorted(_DIST_FIELDS[dtype]))}, "
                         f"not {', '.join(unknown)}")
    name = getattr(kind, "__name__", str(kind))
    a = "an" if name[0] in "aeiou" else "a"
    if dtype == "categorical":
        choices = d.get("choices")
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"{key}: choices must be a non-empty list, got {choices!r}")
        for c in choices:
            if not _takes(kind, optional, c):
                raise SpaceError(f"{key} is {a} {name} key; the choice {c!r} is not {a} {name}")
        if len({json.dumps(c) for c in choices}) != len(choices):
            raise SpaceError(f"{key}: choices {choices} repeat a value")
        return {"type": dtype, "choices": list(choices)}
    if kind not in (int, float, Any) or (kind is int and dtype == "float"):
        fix = "type: int" if kind is int else "type: categorical with choices"
        raise SpaceError(f"{key} is {a} {name} key and cannot take {'an' if dtype == 'int' else 'a'} {dtype} "
                         f"distribution; use {fix}")
    _check_range(key, d)
    out = {"type": dtype, "low": d["low"], "high": d["high"]}
    if dtype == "float":
        out["low"], out["high"] = float(d["low"]), float(d["high"])
    out.update({k: d[k] for k in ("log", "step") if d.get(k) is not None})
    return out


def _read(path: str) -> dict:
    raw = read_yaml(path, "space file", SpaceError)
    if not isinstance(raw, dict) or not raw:
        raise SpaceError(f"{path}: a space is a mapping of config keys to distributions")
    return raw


def parse_space(path: str) -> Space:
    """Read and check ``path`` against the config schema (not yet against a base config)."""
    params, fixed = {}, {}
    raw = dict(_read(path))
    starts = raw.pop(STARTS, [])
    for key, value in _flatten(raw).items():
        if isinstance(value, dict):
            params[key] = _check_distribution(key, value)
        else:
            key_type(key)
            if key in UNSEARCHABLE:
                raise SpaceError(f"{key} is set by wavygraph tune itself; remove it from the space")
            fixed[key] = value
    if not params:
        raise SpaceError(f"{path} has no distribution to search (a mapping with type: float, int or categorical)")
    return Space(path=os.path.abspath(path), params=params, fixed=fixed, starts=_check_starts(starts, params))


def _inside(d: dict, value: Any) -> bool:
    """Whether ``value`` is a point of the checked distribution ``d``."""
    if d["type"] == "categorical":
        return any(json.dumps(value) == json.dumps(c) for c in d["choices"])
    if isinstance(value, bool) or not isinstance(value, int if d["type"] == "int" else (int, float)):
        return False
    return d["low"] <= value <= d["high"]


def _check_starts(starts: Any, params: dict) -> list:
    """The ``starts`` list: :data:`BASE` (once) or mappings of searched keys to
    values inside their distributions."""
    if not isinstance(starts, list) or not all((isinstance(s, dict) and s) or s == BASE for s in starts):
        raise SpaceError(f"{STARTS} must be a list of mappings of searched keys to values (or {BASE!r}, the base "
                         f"config's values), got {starts!r}")
    out = []
    for i, start in enumerate(starts):
        point = start if start == BASE else _flatten(start)
        for key, value in ({} if start == BASE else point).items():
            if key not in params:
                raise SpaceError(f"{STARTS}[{i}]: {key} is not searched by the space; "
                                 "a start sets searched keys only")
            if not _inside(params[key], value):
                raise SpaceError(f"{STARTS}[{i}]: {key}={value!r} lies outside its distribution {params[key]}")
        if point in out:
            raise SpaceError(f"{STARTS}[{i}] repeats an earlier start")
        out.append(point)
    return out


#: :func:`_nearest`'s answer where the base config has no point (None is a categorical's choice)
_NO_POINT = object()


def _nearest(d: dict, value: Any) -> Any:
    """The point of the checked distribution ``d`` nearest to the base
    config's ``value``, or :data:`_NO_POINT` where it has none (a value that
    is not among a categorical's choices, or not a number for a range)."""
    if d["type"] == "categorical":
        return value if _inside(d, value) else _NO_POINT
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _NO_POINT
    value = min(max(value, d["low"]), d["high"])
    if d.get("step"):  # onto the grid low + k * step, inside the range
        k = round((value - d["low"]) / d["step"])
        value = min(d["low"] + k * d["step"], d["high"] - (d["high"] - d["low"]) % d["step"])
    return int(round(value)) if d["type"] == "int" else float(value)


def base_point(params: dict, cfg) -> dict:
    """The :data:`BASE` start: every searched key at the config ``cfg``'s
    value, moved to the nearest point of its distribution; keys without
    one are left out (drawn). A null among a categorical's choices is a
    point like any other."""
    from omegaconf import OmegaConf

    point = {}
    for key, d in params.items():
        value = _nearest(d, OmegaConf.select(cfg, key))
        if value is not _NO_POINT:
            point[key] = value
    return point


def load_space(path: str, config: str | None, overrides: Sequence[str] = ()) -> Space:
    """:func:`parse_space`, then every endpoint and choice on the base
    ``config`` with ``overrides``: a value the config rejects, or a searched
    key also given as an override, is a :class:`SpaceError`. :data:`BASE`
    in ``starts`` becomes the base config's point (:func:`base_point`), and
    each start is checked as a whole on the base config."""
    space = parse_space(path)
    given = {item.split("=", 1)[0].strip() for item in overrides}
    for key in space.params:
        if key in given:
            raise SpaceError(f"{key} is searched by the space and also set as {key}=...; drop one of them")
    base = space.fixed_overrides() + list(overrides)
    cfg = load_config(config, base)
    for key, d in space.params.items():
        values = d["choices"] if d["type"] == "categorical" else [d["low"], d["high"]]
        for value in values:
            try:
                load_config(config, base + [override(key, value)])
            except ConfigError as exc:
                raise SpaceError(f"space {os.path.basename(path)}, {key}={value!r}: {exc}") from None
    starts = []
    for i, start in enumerate(space.starts):  # BASE becomes the base config's point; a repeated point runs once
        point = base_point(space.params, cfg) if start == BASE else start
        try:  # a start is a whole point: its keys together
            load_config(config, base + [override(k, v) for k, v in point.items()])
        except ConfigError as exc:
            raise SpaceError(f"space {os.path.basename(path)}, {STARTS}[{i}]: {exc}") from None
        if point and point not in starts:
            starts.append(point)
    space.starts = starts
    return space
