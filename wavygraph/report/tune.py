"""The report of a tune folder (``wavygraph report DIR`` where ``DIR`` holds
``tune.json``): read from its files only (``tune.json``, ``trials.csv``,
``final.json``), so it works on any machine that has the folder.

Writes into ``DIR`` (or ``--out``):

* ``summary.md``: the trial counts, the best trial (its parameters,
  validation and test score), the ten best trials, the parameter importances
  and, with ``--final-seeds``, the final seeds' table (test mean ± std) and
  the candidates the pick was made from;
* ``optimization_history.png``: the validation score of every trial that
  counts (pruned ones at their best score when pruned) and the best so far;
* ``param_importance.png``: Optuna's fANOVA importance of each searched key
  over the complete trials (left out, with a note, when there are too few
  trials or too few distinct values to tell).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

from .plots import _pyplot
from .results import ReportError

TOP = 10


def is_tune_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / "tune.json").is_file()


def load_tune(path: str | os.PathLike) -> tuple[dict, pd.DataFrame, dict | None]:
    """``(tune.json, trials.csv as a frame, final.json or None)``."""
    root = Path(path)
    with open(root / "tune.json") as fh:
        manifest = json.load(fh)
    if not (root / "trials.csv").is_file():
        raise ReportError(f"{path} holds no trials.csv yet; run `wavygraph tune` first")
    df = pd.read_csv(root / "trials.csv")
    final = None
    if (root / "final.json").is_file():
        with open(root / "final.json") as fh:
            final = json.load(fh)
    return manifest, df, final


def _parse(value, dist: str):
    """A ``trials.csv`` cell as a value of the distribution (Optuna's JSON)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution, json_to_distribution

    d = json_to_distribution(dist)
    if isinstance(d, CategoricalDistribution):
        missing = isinstance(value, float) and math.isnan(value)
        for c in d.choices:
            if (c is None and missing) or str(c) == str(value):
                return c
            if isinstance(c, (int, float)) and not isinstance(c, bool) and not missing \
                    and not isinstance(value, str) and float(c) == float(value):
                return c
        raise ReportError(f"trials.csv: {value!r} is not one of the choices {d.choices}")
    return int(value) if isinstance(d, IntDistribution) else float(value)


def importances(manifest: dict, df: pd.DataFrame) -> tuple[dict | None, str]:
    """fANOVA importances over the complete trials, or ``(None, why not)``."""
    import optuna
    from optuna.distributions import json_to_distribution

    done = df[df["state"] == "COMPLETE"]
    dists = {k: json_to_distribution(v) for k, v in manifest["distributions"].items()}
    varied = [k for k in dists if k in done and done[k].astype(str).nunique() > 1]
    if len(done) < 2 or not varied:
        return None, "parameter importance needs at least 2 complete trials that differ in a searched key"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize")
    for _, row in done.iterrows():
        params = {k: _parse(row[k], manifest["distributions"][k]) for k in dists}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=float(row["val"])))
    try:
        scores = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
    except Exception as exc:  # too few trials for the evaluator
        return None, f"parameter importance could not be computed ({type(exc).__name__}: {exc})"
    return dict(scores), ""


def plot_history(df: pd.DataFrame, path: Path) -> Path | None:
    """Validation score per trial number and the best so far."""
    counted = df[df["state"].isin(["COMPLETE", "PRUNED"])].sort_values("number")
    if counted.empty:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    done = counted[counted["state"] == "COMPLETE"]
    pruned = counted[counted["state"] == "PRUNED"]
    ax.scatter(done["number"], done["val"], s=18, label="complete")
    if not pruned.empty:
        ax.scatter(pruned["number"], pruned["val"], s=18, marker="x", color="grey", label="pruned (when stopped)")
    if not done.empty:
        best = done.set_index("number")["val"].cummax().reindex(counted["number"]).ffill()
        ax.step(best.index, best.values, where="post", color="C3", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel("validation score")
    ax.set_title("optimisation history")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_importance(scores: dict, path: Path) -> Path:
    plt = _pyplot()
    keys = list(scores)[::-1]
    fig, ax = plt.subplots(figsize=(6, 0.5 * len(keys) + 1.2))
    ax.barh(keys, [scores[k] for k in keys])
    ax.set_xlabel("importance (fANOVA, complete trials)")
    ax.set_title("parameter importance")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _fmt(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def summary_text(manifest: dict, df: pd.DataFrame, final: dict | None, scores: dict | None, note: str) -> str:
    keys = list(manifest["params"])
    states = df["state"].value_counts()
    lines = [f"# Tune: {manifest['study_name']}", "",
             f"{int(states.get('COMPLETE', 0))} complete, {int(states.get('PRUNED', 0))} pruned, "
             f"{int(states.get('FAIL', 0))} failed of {manifest['trials']} requested; space `{manifest['space']}`; "
             f"objective: the best validation score of each run", ""]
    done = df[df["state"] == "COMPLETE"].sort_values(["val", "number"], ascending=[False, True])
    if not done.empty:
        b = done.iloc[0]
        lines += [f"**best trial {int(b['number'])}**: validation {_fmt(b['val'])}, test {_fmt(b['test'])} "
                  f"(`wavygraph train best.yaml`)", "", "| key | value |", "|---|---|"]
        lines += [f"| {k} | {_fmt(b[k])} |" for k in keys] + [""]
        lines += [f"## The {min(TOP, len(done))} best trials", "",
                  "| trial | " + " | ".join(keys) + " | val | test |", "|---:|" + "---:|" * (len(keys) + 2)]
        lines += ["| " + " | ".join([str(int(r["number"]))] + [_fmt(r[k]) for k in keys]
                                    + [_fmt(r["val"]), _fmt(r["test"])]) + " |" for _, r in done.head(TOP).iterrows()]
        lines.append("")
    lines += ["## Parameter importance", ""]
    lines += (["| key | importance |", "|---|---:|"] + [f"| {k} | {v:.3f} |" for k, v in scores.items()]
              if scores else [note])
    if final:
        lines += ["", f"## Final seeds (trial {final.get('trial')})", "", "| seed | val | test |", "|---:|---:|---:|"]
        lines += [f"| {s} | {_fmt(v)} | {_fmt(t)} |" for s, v, t in zip(final["seeds"], final["val"], final["test"])]
        lines += ["", f"test {final['test_mean']:.4f} ± {final['test_std']:.4f} over {len(final['seeds'])} seeds"]
        if len(final.get("candidates", [])) > 1:
            lines += ["", "The candidates (the trials of the highest validation scores), the pick the highest mean "
                      "validation over the seeds:", "", "| trial | trial val | mean val | test |", "|---:|---:|---:|---:|"]
            lines += [f"| {c['trial']} | {_fmt(c['trial_val'])} | {_fmt(c['val_mean'])} | "
                      f"{c['test_mean']:.4f} ± {c['test_std']:.4f} |" for c in final["candidates"]]
    return "\n".join(lines) + "\n"


def make_tune_report(path: str | os.PathLike, dest: str | os.PathLike | None = None) -> dict:
    """Write ``summary.md`` and the plots of a tune folder; returns their paths."""
    manifest, df, final = load_tune(path)
    target = Path(dest) if dest is not None else Path(path)
    target.mkdir(parents=True, exist_ok=True)
    scores, note = importances(manifest, df)
    summary = target / "summary.md"
    summary.write_text(summary_text(manifest, df, final, scores, note))
    return {"summary": summary, "history_plot": plot_history(df, target / "optimization_history.png"),
            "importance_plot": plot_importance(scores, target / "param_importance.png") if scores else None}
