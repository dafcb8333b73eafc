"""One trial: its config, its run in a temporary folder, its atomic publish.

A trial runs ``wavygraph.train.loop.run_in_place`` into ``OUT/tmp/<number>.<host>.<pid>.<token>/``
and, finished or pruned, is published by one rename (:func:`~wavygraph.utils.publish_dir`) to
``OUT/trials/<number>/`` (``config.yaml``, ``metrics.json``, ``model.pt`` as a
train run writes them, and ``trial.json``: state, parameters, scores): a
trial folder is complete or absent whenever the study is stopped, as a
sweep cell is. The objective is the run's best validation score; after every
evaluation the best-so-far validation score is reported to Optuna, whose
pruner may stop the run (the trial is then PRUNED, its folder holds
``config.yaml`` and ``trial.json``).
"""
from __future__ import annotations

import os
import shutil
import socket
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig, OmegaConf

from wavygraph.folders import temp_dir, temp_dirs
from wavygraph.utils import atomic_write_json, atomic_write_text, publish_dir

from .space import Space, override

TRIAL_FILE = "trial.json"


@dataclass
class TuneSpec:
    """Everything a process of a study needs (pickled to ``--jobs`` workers).

    Args:
        config (str): the base config file. overrides (list): its ``key=value``
        overrides. space (Space): the search space. out_dir (str). storage
        (str): the storage URL. study_name (str). trials (int): trials to
        count (COMPLETE + PRUNED) over every process. deadline (float): no
        trial starts after this ``time.time()`` (``None``: no limit). seed
        (int): the sampler's seed. pruner (str): ``median``, ``hyperband`` or
        ``none``. warmup (int): epochs before a trial may be pruned.
        startup (int): trials before pruning starts. diagnostics (bool):
        ``train.diagnostics`` of the trials.
    """

    config: str | None
    overrides: list
    space: Space
    out_dir: str
    storage: str
    study_name: str
    trials: int
    deadline: float | None = None
    seed: int = 0
    pruner: str = "median"
    warmup: int = 0
    startup: int = 5
    diagnostics: bool = False
    extra: dict = field(default_factory=dict)


def trial_config(spec: TuneSpec, params: dict, out_dir: str, device: str | None = None,
                 threads: int | None = None, seed: int | None = None) -> DictConfig:
    """The resolved config of a trial with ``params``: the base config < the
    space's fixed values < the overrides < the parameters, run into ``out_dir``."""
    from wavygraph.config import load_config

    items = spec.space.fixed_overrides() + list(spec.overrides) + [override(k, v) for k, v in params.items()]
    if seed is not None:
        items.append(override("train.seed", seed))
    cfg = load_config(spec.config, items)
    cfg.out_dir = str(out_dir)
    cfg.train.progress = False
    cfg.train.resume = False
    cfg.train.checkpoint_every = 0
    cfg.train.diagnostics = spec.diagnostics
    if device is not None:
        cfg.train.device = device
    if threads and not cfg.train.num_threads:  # recorded, so best.yaml runs with the same threads
        cfg.train.num_threads = threads
    return cfg


def sampler_for(seed: int, number: int) -> optuna.samplers.BaseSampler:
    """TPE seeded from a hash of ``seed`` and a trial number (consecutive
    seeds would give correlated first draws)."""
    from hashlib import sha256

    return optuna.samplers.TPESampler(seed=int(sha256(f"{seed}/{number}".encode()).hexdigest()[:8], 16))


def suggest(trial: optuna.Trial, space: Space) -> dict:
    """The trial's value of every searched key."""
    params = {}
    for key, d in space.params.items():
        if d["type"] == "categorical":
            params[key] = trial.suggest_categorical(key, d["choices"])
        elif d["type"] == "float":
            params[key] = trial.suggest_float(key, d["low"], d["high"], log=d.get("log", False), step=d.get("step"))
        else:
            params[key] = trial.suggest_int(key, d["low"], d["high"], log=d.get("log", False),
                                            step=d.get("step") or 1)
    return params


def clean_stale(out_dir: str) -> None:
    """Remove the temporary folders of this host's dead processes."""
    for entry, _, dead in temp_dirs(out_dir):
        if dead:
            shutil.rmtree(entry, ignore_errors=True)


def publish(tmp: Path, final: Path, cfg: DictConfig, record: dict) -> None:
    """Write ``trial.json`` (and ``config.yaml`` naming ``final``) into ``tmp``, then rename it to ``final``."""
    cfg.out_dir = str(final)
    if (tmp / "config.yaml").exists():
        atomic_write_text(tmp / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    record = {**record, "config": OmegaConf.to_container(cfg, resolve=True), "host": socket.gethostname(),
              "pid": os.getpid(), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    atomic_write_json(tmp / TRIAL_FILE, record, sort_keys=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    publish_dir(tmp, final)


class Objective:
    """The objective of one process: ``Objective(spec, device, threads)(trial)``.

    ``lock`` (a held :class:`filelock.FileLock`, or ``None``) is released once
    the trial is labelled and checked against the requested count; a trial
    beyond it (another machine asked at the same moment) is marked
    ``surplus`` and fails without training (it does not count).
    """

    def __init__(self, spec: TuneSpec, device: str | None = None, threads: int | None = None):
        self.spec, self.device, self.threads = spec, device, threads
        self.lock = None
        self.surplus = False

    def _release(self) -> None:
        if self.lock is not None and self.lock.is_locked:
            self.lock.release()
        self.lock = None

    def __call__(self, trial: optuna.Trial) -> float:
        from .storage import label, taken

        try:
            label(trial)
            if taken(trial.study, below=trial.number) >= self.spec.trials:
                self.surplus = True
                trial.set_user_attr("surplus", True)
                raise RuntimeError(f"trial {trial.number} is beyond the requested {self.spec.trials}")
        finally:
            self._release()
        trial.study.sampler = sampler_for(self.spec.seed, trial.number)  # draws at suggest time
        params = suggest(trial, self.spec.space)
        return self.run(trial, params)

    def run(self, trial: optuna.Trial, params: dict) -> float:
        from wavygraph.train.loop import run_in_place

        out = self.spec.out_dir
        tmp, final = temp_dir(out, str(trial.number)), Path(out) / "trials" / str(trial.number)
        best: dict[str, Any] = {}
        cfg = None
        start = time.time()

        def on_eval(epoch: int, scores: dict, best_so_far: dict) -> None:
            best.update(best_so_far)
            trial.report(best_so_far["val"], epoch)
            if self.spec.pruner != "none" and trial.should_prune():
                raise optuna.TrialPruned(f"epoch {epoch}, best val {best_so_far['val']:.4f}")

        try:
            cfg = trial_config(self.spec, params, tmp, self.device, self.threads)
            metrics = run_in_place(cfg, on_eval=on_eval)
        except optuna.TrialPruned:
            record = {"number": trial.number, "state": "PRUNED", "params": params, "val": best.get("val"),
                      "test": best.get("test"), "best_epoch": best.get("epoch"), "seconds": time.time() - start}
            self._finish(trial, tmp, final, cfg, record)
            raise
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            self._failed(trial, params, exc)
            raise
        record = {"number": trial.number, "state": "COMPLETE", "params": params, "val": metrics["best_val"],
                  "test": metrics["test"], "best_epoch": metrics["best_epoch"], "epochs": metrics["epochs"],
                  "seconds": time.time() - start}
        self._finish(trial, tmp, final, cfg, record)
        return float(metrics["best_val"])

    def _finish(self, trial: optuna.Trial, tmp: Path, final: Path, cfg: DictConfig, record: dict) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        publish(tmp, final, cfg, record)
        for key in ("val", "test", "best_epoch", "seconds"):
            trial.set_user_attr(key, record.get(key))
        trial.set_user_attr("config", OmegaConf.to_container(cfg, resolve=True))

    def _failed(self, trial: optuna.Trial, params: dict, exc: BaseException) -> None:
        failed = Path(self.spec.out_dir) / "failed"
        failed.mkdir(parents=True, exist_ok=True)
        atomic_write_text(failed / f"{trial.number}.txt", f"{params}\n{traceback.format_exc()}")
        trial.set_user_attr("error", f"{type(exc).__name__}: {str(exc).strip()[:300]}")


def summary_of(params: dict) -> str:
    return " ".join(f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
                    for k, v in params.items())


def parse_seeds(text: str | None) -> list[int]:
    """``--final-seeds 0,1,2`` -> ``[0, 1, 2]`` (distinct integers)."""
    from .space import SpaceError

    if text is None:
        return []
    try:
        seeds = [int(s) for s in text.split(",") if s.strip() != ""]
    except ValueError:
        raise SpaceError(f"--final-seeds must be comma-separated integers (e.g. 0,1,2), got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise SpaceError(f"--final-seeds must list distinct integers >= 0, got {text!r}")
    return seeds

