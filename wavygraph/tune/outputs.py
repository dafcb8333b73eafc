"""The files of a tune folder ``OUT`` besides the trials, each written atomically:

* ``tune.json``: the search (base config, overrides, space and its Optuna
  distributions, storage, study name, requested trials, seed, pruner), read
  by ``wavygraph report``;
* ``trials.csv``: one row per trial (number, parameters, state, val, test,
  best_epoch, seconds), rewritten after every trial;
* ``best.yaml``: the resolved config of the trial with the highest
  validation score, writing into ``OUT/best`` (``wavygraph train best.yaml``);
  with ``--final-seeds``, of the one among the ``--final-top`` best with the
  highest mean validation score over those seeds;
* with ``--final-seeds``: ``OUT/final/trial<k>-seed<s>/`` (a run of each
  candidate per seed, published as a trial is) and ``final.json``.
"""
from __future__ import annotations

import csv
import io
import math
import os
import statistics
import time
from pathlib import Path
from typing import Sequence

import optuna
from omegaconf import OmegaConf

from wavygraph.folders import temp_dir
from wavygraph.utils import atomic_write_json, atomic_write_text, worker_device

from .storage import counts, masked
from .trial import TRIAL_FILE, TuneSpec, publish

TRIAL_COLUMNS = ("state", "val", "test", "best_epoch", "seconds")


def write_manifest(spec: TuneSpec, signature: dict) -> None:
    from optuna.distributions import distribution_to_json

    manifest = {
        "config": os.path.abspath(spec.config) if spec.config else None,
        "overrides": list(spec.overrides),
        "space": spec.space.path,
        "params": spec.space.params,
        "fixed": spec.space.fixed,
        "distributions": {k: distribution_to_json(d) for k, d in spec.space.distributions().items()},
        "storage": masked(spec.storage),
        "study_name": spec.study_name,
        "trials": spec.trials,
        "seed": spec.seed,
        "pruner": {"name": spec.pruner, "warmup": spec.warmup, "startup": spec.startup},
        "signature": signature,
    }
    atomic_write_json(Path(spec.out_dir) / "tune.json", manifest, sort_keys=True)


def _number(value) -> object:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else value


def trial_rows(study: optuna.Study, keys: Sequence[str]) -> list[dict]:
    """One row per trial (none for a surplus trial that never ran), by number."""
    rows = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if t.user_attrs.get("surplus"):
            continue
        a = t.user_attrs
        row = {"number": t.number, **{k: t.params.get(k, "") for k in keys}, "state": t.state.name,
               "val": _number(a.get("val", t.value)), "test": _number(a.get("test")),
               "best_epoch": _number(a.get("best_epoch")), "seconds": _number(a.get("seconds")),
               "retry_of": _number(a.get("retry_of")), "start": _number(a.get("start"))}
        rows.append(row)
    return rows


def write_trials_csv(study: optuna.Study, out_dir: str) -> Path:
    keys = list(study.user_attrs.get("search", {}).get("params", {}))
    buf = io.StringIO()
    fieldnames = ["number", *keys, *TRIAL_COLUMNS, "retry_of", "start"]
    writer = csv.DictWriter(buf, fieldnames=fieldnames, lineterminator="\n")
    writer.writeheader()
    writer.writerows(trial_rows(study, keys))
    path = Path(out_dir) / "trials.csv"
    atomic_write_text(path, buf.getvalue())
    return path


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The COMPLETE trial with the highest validation score (the lowest number on ties)."""
    top = top_trials(study, 1)
    return top[0] if top else None


def top_trials(study: optuna.Study, k: int) -> list[optuna.trial.FrozenTrial]:
    """The ``k`` COMPLETE trials with the highest validation scores, best first (lower numbers first on ties)."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return sorted(done, key=lambda t: (-t.value, t.number))[:k]


def write_best(out_dir: str, trial: optuna.trial.FrozenTrial, why: str | None = None) -> Path:
    """``best.yaml``: the trial's resolved config, writing into ``OUT/best``."""
    config = dict(trial.user_attrs["config"])
    config["out_dir"] = os.path.join(out_dir, "best")
    config["train"] = {**config["train"], "progress": True}
    text = (f"# the best trial ({trial.number}) of {os.path.join(out_dir, 'trials.csv')}: validation "
            f"{trial.value:.6g}, test {trial.user_attrs.get('test')}\n"
            + (f"# {why}\n" if why else "") + f"# wavygraph train {out_dir}/best.yaml\n")
    path = Path(out_dir) / "best.yaml"
    atomic_write_text(path, text + OmegaConf.to_yaml(OmegaConf.create(config)))
    return path


def _final_run(spec: TuneSpec, number: int, config: dict, seed: int, device: str | None) -> dict:
    """Trial ``number``'s config with ``train.seed=seed`` in ``OUT/final/trial<k>-seed<s>/`` (kept when present)."""
    import json

    from wavygraph.config import load_config
    from wavygraph.train.loop import run_in_place

    final = Path(spec.out_dir) / "final" / f"trial{number}-seed{seed}"
    if (final / TRIAL_FILE).is_file():
        with open(final / TRIAL_FILE) as fh:
            return json.load(fh)
    tmp = temp_dir(spec.out_dir, f"final{number}-{seed}")
    cfg = OmegaConf.merge(load_config(None), config)
    cfg.train.seed, cfg.out_dir, cfg.train.progress = seed, str(tmp), False
    if device is not None:
        cfg.train.device = device
    start = time.time()
    metrics = run_in_place(cfg)
    record = {"trial": number, "seed": seed, "state": "COMPLETE", "val": metrics["best_val"],
              "test": metrics["test"], "best_epoch": metrics["best_epoch"], "seconds": time.time() - start}
    publish(tmp, final, cfg, record)
    return record


def _final_runs(spec: TuneSpec, tasks: list[tuple[int, dict, int]], jobs: int, devices: Sequence[str]) -> list[dict]:
    """The final runs ``(trial number, config, seed)``, ``jobs`` at once in spawned
    workers (task ``i`` on ``devices[i % len]``); in this process for one job."""
    if jobs <= 1 or len(tasks) <= 1:
        return [_final_run(spec, n, c, s, worker_device(devices, i)) for i, (n, c, s) in enumerate(tasks)]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from .study import worker_setup

    with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=mp.get_context("spawn"), initializer=worker_setup,
                             initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(_final_run, spec, n, c, s, worker_device(devices, i))
                   for i, (n, c, s) in enumerate(tasks)]
        return [f.result() for f in futures]


def run_final(spec: TuneSpec, trials: Sequence[optuna.trial.FrozenTrial], seeds: Sequence[int], jobs: int = 1,
              devices: Sequence[str] = ()) -> dict:
    """Rerun each of ``trials`` (the best by validation first) on ``seeds`` and pick
    the one with the highest mean validation score over them (the earlier in
    ``trials`` on ties): one run's validation score is partly its seed's luck,
    so the top trial of a search is often not the best config. Writes and
    returns ``final.json``: the pick's scores per seed, and every candidate's means."""
    tasks = [(t.number, t.user_attrs["config"], s) for t in trials for s in seeds]
    records = iter(_final_runs(spec, tasks, jobs, devices))
    candidates = []
    for t in trials:
        runs = [next(records) for _ in seeds]
        vals, tests = [float(r["val"]) for r in runs], [float(r["test"]) for r in runs]
        candidates.append({"trial": t.number, "trial_val": t.value, "val": vals, "test": tests,
                           "val_mean": statistics.fmean(vals), "test_mean": statistics.fmean(tests),
                           "test_std": statistics.stdev(tests) if len(tests) > 1 else 0.0})
    pick = max(candidates, key=lambda c: c["val_mean"])  # max keeps the first of equals
    result = {"seeds": list(seeds), "test": pick["test"], "val": pick["val"], "val_mean": pick["val_mean"],
              "test_mean": pick["test_mean"], "test_std": pick["test_std"], "trial": pick["trial"],
              "candidates": candidates}
    atomic_write_json(Path(spec.out_dir) / "final.json", result)
    return result


def finish(spec: TuneSpec, study: optuna.Study, seeds: Sequence[int], start: float, top: int = 1, jobs: int = 1,
           devices: Sequence[str] = ()) -> dict:
    """Write ``trials.csv``, ``best.yaml`` and ``final.json`` (the ``top`` best
    trials rerun on ``seeds``, ``best.yaml`` then the pick); returns the summary line's dict."""
    write_trials_csv(study, spec.out_dir)
    c = counts(study)
    summary = {"study": spec.study_name, "storage": masked(spec.storage), "trials": spec.trials,
               "complete": c["complete"], "pruned": c["pruned"], "failed": c["failed"]}
    best = best_trial(study)
    written = ["trials.csv"]
    errors = [t.user_attrs["error"] for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))
              if "error" in t.user_attrs]
    if best is None and errors:
        summary["last_error"] = errors[-1]
    if best is not None:
        write_best(spec.out_dir, best)  # the top trial now, the pick once the final runs have chosen
        written.append("best.yaml")
        if seeds:
            candidates = top_trials(study, top)
            final = run_final(spec, candidates, seeds, jobs, devices)
            written.append("final.json")
            best = next(t for t in candidates if t.number == final["trial"])
            if len(candidates) > 1:
                write_best(spec.out_dir, best, f"picked from the {len(candidates)} best trials by mean validation "
                                               f"over seeds {','.join(map(str, seeds))}: {final['val_mean']:.6g}")
            summary.update(final_trial=final["trial"], final_val_mean=final["val_mean"],
                           final_test_mean=final["test_mean"], final_test_std=final["test_std"])
        summary.update(best_trial=best.number, best_val=best.value, best_test=best.user_attrs.get("test"),
                       best_params=best.params)
    summary["seconds"] = time.time() - start
    summary["wrote"] = [os.path.join(spec.out_dir, name) for name in written]
    return summary
