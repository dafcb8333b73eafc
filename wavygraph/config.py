"""The configuration schema: a tree of dataclasses merged with OmegaConf.

Precedence: dataclass defaults < YAML file < ``key=value`` overrides. The
merge is strict: an unknown key, a value of the wrong type or an invalid
choice raises :class:`ConfigError` with a one-line message that names the key.

    >>> cfg = load_config("configs/cora.yaml", ["model.num_layers=16", "train.seed=1"])
    >>> cfg.model.num_layers
    16

Relative paths (``data.root``, ``out_dir``) are kept as written: they are
resolved against the working directory of the process that uses them.
"""
from __future__ import annotations

import importlib
import math
import os
import sys
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from wavygraph.data.csbm import CSBM_PRESETS
from wavygraph.data.errors import WavygraphDataError
from wavygraph.data.files import ARRAY_FORMATS, check_file
from wavygraph.data.splits import SPLIT_MODES, check_fractions
from wavygraph.nn.model_args import ModelArgs, Spelling, check_model_args
from wavygraph.nn.validate import InputError, check_choice
from wavygraph.utils import one_line

#: ``train.cpu_heap`` values (wavygraph.train.env.fix_cpu_heap)
CPU_HEAPS = ("auto", "mmap", "default")


DIST_BACKENDS = ("auto", "gloo", "nccl")
#: ``model.arch``: the WavyDIFFormer or a PyG baseline (see :mod:`wavygraph.train.models`).
ARCHS = ("wavy", "gcn", "mlp", "gcnii", "sgformer")


class ConfigError(ValueError):
    """An invalid configuration: unknown key, wrong type or bad value."""


@dataclass
class CSBMConfig:
    """Options of the synthetic ``csbm`` data set; ``None`` takes the preset's value."""

    preset: str = "arxiv"  # "arxiv" (ogbn-arxiv's shape), "proteins" (ogbn-proteins' shape) or "small"
    num_nodes: Optional[int] = None
    num_classes: Optional[int] = None
    num_features: Optional[int] = None
    avg_degree: Optional[float] = None
    homophily: Optional[float] = None
    snr: Optional[float] = None
    # preset "proteins" (multi-label, ogbn-proteins' shape); see wavygraph.data.csbm
    num_tasks: Optional[int] = None
    num_edge_features: Optional[int] = None
    num_communities: Optional[int] = None
    label_noise: Optional[float] = None
    seed: int = 0


@dataclass
class DataConfig:
    name: str = "cora"
    root: str = "data"
    split: int = 0  # which of a data set's splits (Actor: 0..9); random splits: their seed
    # "given": the data set's own split(s); "per_class": a random split drawn from the seed data.split,
    # per_class labelled nodes of each class + num_val + num_test (DIFFormer's protocol, wavygraph.data.splits)
    split_mode: str = "given"
    per_class: int = 20
    num_val: int = 500
    num_test: int = 1000
    normalize_features: bool = False  # row-normalise x (sum 1), PyG's NormalizeFeatures
    download: bool = True  # fetch missing OGB / PyG files with their own loaders (false: offline only)
    # data.name=file: a graph file of your own (docs/own_graphs.md, wavygraph.data.files); paths relative to
    # the working directory. features / labels: .npy, .csv or .pt files, one row per node in the node order
    path: Optional[str] = None  # .pt (a PyG Data), .graphml, .gml, .edgelist / .edges / .txt
    features: Optional[str] = None  # replaces the graph's x
    labels: Optional[str] = None  # replaces the graph's y
    train_fraction: float = 0.6  # a graph without masks: stratified split drawn from the seed data.split,
    val_fraction: float = 0.2  # these shares for training and validation, the rest for testing
    csbm: CSBMConfig = field(default_factory=CSBMConfig)


@dataclass
class ModelConfig(ModelArgs):
    """The model's keys: the arguments of :class:`wavygraph.nn.WavyDIFFormer`
    (:class:`~wavygraph.nn.model_args.ModelArgs`, their defaults and checks)
    and the baselines' own."""

    # model.arch and the baselines' own options (wavygraph/train/models.py). A baseline takes
    # num_layers, hidden_channels and dropout (sgformer also heads) and its own keys below;
    # any other model key set away from its default is an error for it.
    arch: str = "wavy"  # wavy (WavyDIFFormer), gcn, mlp, gcnii or sgformer
    gcnii_alpha: float = 0.1  # initial-residual weight (PyG's GCNII example)
    gcnii_theta: float = 0.5  # identity-map strength, beta_l = log(theta / l + 1)
    gcnii_shared_weights: bool = True
    gcnii_conv_weight_decay: Optional[float] = 0.01  # on the GCN2Conv weights (null: train.weight_decay)
    sgformer_trans_layers: int = 1  # attention layers; model.num_layers counts the GCN branch's layers
    sgformer_trans_dropout: float = 0.2
    sgformer_graph_weight: float = 0.8  # output = w * GCN branch + (1 - w) * attention branch
    sgformer_trans_weight_decay: Optional[float] = 0.001  # on the attention branch (null: train.weight_decay)


@dataclass
class TrainConfig:
    epochs: int = 200
    lr: float = 1e-3
    weight_decay: float = 0.01
    batch_size: Optional[int] = None  # None/0: full batch; else random-partition mini-batches
    eval_batch_size: Optional[int] = None  # None: same as batch_size (0: one full-graph pass)
    eval_every: int = 1
    patience: Optional[int] = None  # stop after this many evaluations without a better val score
    seed: int = 0
    device: str = "auto"  # auto: the GPU where there is one (cuda:0), else cpu; or cpu, cuda, cuda:1, ...
    num_threads: Optional[int] = None  # torch CPU threads; None: torch's default
    # glibc's heap on CPU: "auto" fixes its mmap threshold (train.env.fix_cpu_heap) for the memory
    # modes (model.reversible, model.gradient_checkpointing), "mmap" always, "default" never
    cpu_heap: str = "auto"
    diagnostics: bool = True
    progress: bool = True
    checkpoint_every: int = 0  # write out_dir/checkpoint.pt every k epochs (0: never)
    resume: bool = False  # continue from out_dir/checkpoint.pt (same config) if it exists
    distributed: bool = False  # DistributedDataParallel under torchrun (needs batch_size)
    dist_backend: str = "auto"  # "auto" (nccl on GPUs, gloo on CPU), "gloo" or "nccl"


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    out_dir: str = "runs/default"
    # Python modules imported before the config is checked, e.g. ones that
    # register a residual kind with wavygraph.nn.register_stepper
    imports: List[str] = field(default_factory=list)


def _keyed_line(exc: BaseException) -> str:
    """The first line of the message, after the key that OmegaConf names
    (OmegaConf appends "full_key: ..., object_type=..." lines)."""
    first = one_line(exc)
    full_key = getattr(exc, "full_key", None)
    if full_key and full_key not in first:
        first = f"{full_key}: {first}"
    return first


_COMMON_KEYS = ("arch", "num_layers", "hidden_channels", "dropout")
_BASELINE_KEYS = {
    "gcn": (),
    "mlp": (),
    "gcnii": ("gcnii_alpha", "gcnii_theta", "gcnii_shared_weights", "gcnii_conv_weight_decay"),
    "sgformer": ("heads", "sgformer_trans_layers", "sgformer_trans_dropout", "sgformer_graph_weight",
                 "sgformer_trans_weight_decay"),
}


def wavy_model_keys() -> tuple[str, ...]:
    """The ``model`` keys that are arguments of :class:`wavygraph.nn.WavyDIFFormer` (:class:`ModelArgs`)."""
    return tuple(f.name for f in fields(ModelArgs))


def arch_keys(arch: str) -> tuple[str, ...]:
    """The ``model`` keys that ``model.arch=arch`` uses."""
    if arch == "wavy":  # every key but the baselines' own (a new wavy key needs no listing)
        own = {k for keys in _BASELINE_KEYS.values() for k in keys if k.split("_")[0] in _BASELINE_KEYS}
        return tuple(f.name for f in fields(ModelConfig) if f.name not in own)
    return _COMMON_KEYS + _BASELINE_KEYS[arch]


def _check_arch(m: DictConfig) -> None:
    """A model key set away from its default that ``m.arch`` does not use is an error."""
    used, defaults = set(arch_keys(m.arch)), ModelConfig()
    for f in fields(ModelConfig):
        value = m[f.name]
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        if f.name not in used and value != getattr(defaults, f.name):
            users = [a for a in ARCHS if f.name in arch_keys(a)]
            raise ConfigError(f"model.{f.name}={value!r} does not apply to model.arch={m.arch} "
                              f"(only to {', '.join(users)}); remove it")


def _reset_recipe_keys(cfg: DictConfig, loaded: DictConfig | None, overrides: Sequence[str]) -> None:
    """A file without ``model.arch`` is a recipe for the wavy model: when an
    override picks a baseline, the file's model keys the baseline does not
    use go back to their defaults (keys given as overrides are checked as given)."""
    model = loaded.get("model") if loaded is not None else None
    if not isinstance(model, DictConfig) or "arch" in model or cfg.model.arch not in _BASELINE_KEYS:
        return
    given = {item.split("=", 1)[0].strip() for item in overrides}
    defaults, used = ModelConfig(), set(arch_keys(cfg.model.arch))
    for key in model:
        if key not in used and f"model.{key}" not in given and hasattr(defaults, key):
            cfg.model[key] = getattr(defaults, key)


def _check_baseline_keys(m: DictConfig) -> None:
    if not 0.0 <= m.gcnii_alpha <= 1.0:
        raise ConfigError(f"model.gcnii_alpha={m.gcnii_alpha!r} must lie in [0, 1]")
    if m.gcnii_theta <= 0:
        raise ConfigError(f"model.gcnii_theta={m.gcnii_theta!r} must be > 0")
    if m.sgformer_trans_layers < 1:
        raise ConfigError(f"model.sgformer_trans_layers={m.sgformer_trans_layers!r} must be >= 1")
    if not 0.0 <= m.sgformer_trans_dropout < 1.0:
        raise ConfigError(f"model.sgformer_trans_dropout={m.sgformer_trans_dropout!r} must lie in [0, 1)")
    if not 0.0 <= m.sgformer_graph_weight <= 1.0:
        raise ConfigError(f"model.sgformer_graph_weight={m.sgformer_graph_weight!r} must lie in [0, 1]")
    for key in ("gcnii_conv_weight_decay", "sgformer_trans_weight_decay"):
        if m[key] is not None and m[key] < 0:
            raise ConfigError(f"model.{key}={m[key]!r} must be >= 0 or null")


def _check(cfg: DictConfig) -> None:
    def choice(key: str, value, choices) -> None:
        try:
            check_choice(key, value, choices)
        except InputError as exc:
            raise ConfigError(str(exc)) from None

    def positive(key: str, value, allow_zero: bool = False) -> None:
        if value is None:
            return
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):  # NaN fails no comparison
            number = "a finite number " if isinstance(value, float) else ""
            raise ConfigError(f"{key}={value!r} must be {number}{'>= 0' if allow_zero else '> 0'}")

    m, t, d = cfg.model, cfg.train, cfg.data
    choice("model.arch", m.arch, ARCHS)
    _check_arch(m)
    _check_baseline_keys(m)
    _check_model_args(m)
    choice("data.csbm.preset", cfg.data.csbm.preset, tuple(CSBM_PRESETS))
    positive("train.epochs", t.epochs)
    positive("train.lr", t.lr)
    positive("train.weight_decay", t.weight_decay, allow_zero=True)
    positive("train.batch_size", t.batch_size, allow_zero=True)
    positive("train.eval_batch_size", t.eval_batch_size, allow_zero=True)
    positive("train.eval_every", t.eval_every)
    positive("train.patience", t.patience)
    positive("train.num_threads", t.num_threads)
    choice("train.cpu_heap", t.cpu_heap, CPU_HEAPS)
    positive("data.split", d.split, allow_zero=True)
    choice("data.split_mode", d.split_mode, SPLIT_MODES)
    _check_file_keys(d)
    positive("data.per_class", d.per_class)
    positive("data.num_val", d.num_val, allow_zero=True)
    positive("data.num_test", d.num_test, allow_zero=True)
    positive("train.checkpoint_every", t.checkpoint_every, allow_zero=True)
    choice("train.dist_backend", t.dist_backend, DIST_BACKENDS)
    if t.resume and not t.checkpoint_every:
        raise ConfigError("train.resume=true needs train.checkpoint_every > 0 (the run that is resumed writes checkpoints)")
    if t.distributed and not t.batch_size:
        raise ConfigError("train.distributed=true needs train.batch_size > 0: the ranks split the mini-batches")
    if not d.name:
        raise ConfigError("data.name must not be empty")
    if not str(cfg.out_dir):
        raise ConfigError("out_dir must not be empty")


_FILE_KEYS = ("path", "features", "labels")


def _check_file_keys(d: DictConfig) -> None:
    """``data.name=file`` needs an existing ``data.path`` of a known format;
    the file keys apply to it only; the split's shares must leave test nodes."""
    try:
        check_fractions(d.train_fraction, d.val_fraction)
        if d.name.lower() != "file":
            given = [k for k in _FILE_KEYS if d[k] is not None]
            if given:
                raise ConfigError(f"data.{given[0]}={d[given[0]]!r} applies only to data.name=file; remove it")
            return
        check_file(d.path)
        for key in ("features", "labels"):
            if d[key] is not None:
                check_file(d[key], f"data.{key}", ARRAY_FORMATS)
    except WavygraphDataError as exc:
        raise ConfigError(str(exc)) from None


def import_modules(names: Sequence[str]) -> None:
    """Import the modules of the config's ``imports`` (plugins that register
    residual kinds) from the working directory or ``PYTHONPATH``; a missing
    or failing module is a :class:`ConfigError`."""
    if names and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise ConfigError(f"imports: cannot import {name!r} ({type(exc).__name__}: {_keyed_line(exc)}); "
                              "it must be importable from the working directory or PYTHONPATH") from None


def _check_model_args(m: DictConfig) -> None:
    """The model's arguments, checked as :class:`wavygraph.nn.WavyDIFFormer`
    checks them (one message each, spelled as config keys)."""
    values = {f.name: m[f.name] for f in fields(ModelArgs)}
    values = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v for k, v in values.items()}
    try:
        check_model_args(ModelArgs(**values), Spelling("model.", yaml=True))
    except InputError as exc:
        raise ConfigError(str(exc)) from None


def load_config(path: str | None, overrides: Sequence[str] = ()) -> DictConfig:
    """Defaults < YAML file at ``path`` (optional) < ``key=value`` overrides.

    Returns a structured, read-only-schema :class:`~omegaconf.DictConfig`
    (unknown keys stay errors after loading). Raises :class:`ConfigError`
    with a one-line message on any problem.
    """
    cfg = OmegaConf.structured(Config)
    loaded = None
    try:
        if path is not None:
            if not os.path.isfile(path):
                raise ConfigError(f"config file not found: {path}")
            try:
                loaded = OmegaConf.load(path)
            except ConfigError:
                raise
            except Exception as exc:  # yaml.YAMLError and friends
                raise ConfigError(f"cannot read {path}: {_keyed_line(exc)}") from None
            if loaded is None:
                loaded = OmegaConf.create({})
            if not isinstance(loaded, DictConfig):
                raise ConfigError(f"{path}: the top level must be a mapping of keys")
            cfg = OmegaConf.merge(cfg, loaded)
        for item in overrides:
            if "=" not in item or item.startswith("="):
                raise ConfigError(f"override {item!r} is not of the form key=value")
        if overrides:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    except ConfigError:
        raise
    except OmegaConfBaseException as exc:
        msg = _keyed_line(exc)
        if "Key '" in msg and "not in" in msg:
            full_key = getattr(exc, "full_key", None) or msg
            msg = f"unknown config key {full_key!r}"
        raise ConfigError(msg) from None
    except Exception as exc:  # e.g. a malformed dotlist entry
        raise ConfigError(_keyed_line(exc)) from None
    _reset_recipe_keys(cfg, loaded, overrides)
    import_modules(cfg.imports)
    _check(cfg)
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML text."""
    return OmegaConf.to_yaml(cfg, resolve=True)


def model_label(model) -> str:
    """The name of a run's model in progress bars and report columns: the
    residual kind of a wavy model, else the baseline's ``arch``. ``model``: the
    ``model`` section of a config (a :class:`DictConfig` or a plain dict;
    without ``arch``, the wavy model)."""
    arch = model.get("arch", "wavy")
    return model.get("residual") if arch == "wavy" else arch
