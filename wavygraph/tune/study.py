"""Running a study: the trial loop of one process (:func:`work`), ``--jobs K``
worker processes on one machine (:func:`run_trials`), and the whole command
(:func:`tune`).

Every process, on any machine, runs the same loop against the shared
storage: settle the trials of dead processes, stop when the study holds the
requested number of trials that count or will (COMPLETE, PRUNED, live
RUNNING), else ask for one more and run it. Processes that share ``out_dir``
take these steps under one file lock, so that they never ask for a trial too
many; processes on other machines are caught by the check inside the
objective (:class:`~wavygraph.tune.trial.Objective`).

The sampler is Optuna's TPE, seeded per trial from ``--seed`` and the trial's
number (:func:`~wavygraph.tune.trial.sampler_for`): a one-process study
repeats, a resumed study does not draw its first trials' parameters again,
and two machines asking at the same moment do not draw the same ones.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Sequence

import optuna
from filelock import FileLock

from wavygraph.utils import worker_device, worker_threads

from .storage import counts, open_storage, open_study, settle_dead, taken
from .trial import Objective, TuneSpec, clean_stale, sampler_for

LOCK = ".tune.lock"


def quiet_optuna() -> None:
    """Optuna's per-trial log lines off (the progress bar and trials.csv say it)."""
    import warnings

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def make_pruner(spec: TuneSpec, epochs: int) -> optuna.pruners.BasePruner:
    """``median`` (after ``startup`` trials and ``warmup`` epochs), ``hyperband``
    (from ``warmup`` to ``epochs`` epochs) or ``none``."""
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=spec.startup, n_warmup_steps=spec.warmup)
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(1, spec.warmup), max_resource=max(epochs, 2))
    return optuna.pruners.NopPruner()


def lock_of(out_dir: str) -> FileLock:
    os.makedirs(out_dir, exist_ok=True)
    return FileLock(os.path.join(out_dir, LOCK))


def work(spec: TuneSpec, device: str | None = None, threads: int | None = None,
         on_trial: Callable[[], None] | None = None) -> dict:
    """Run trials in this process until the study is full, the deadline has
    passed, or ``spec.trials`` trials of this process failed in a row.
    Returns ``{"ran", "failed", "surplus"}`` of this process."""
    quiet_optuna()
    study = open_study(open_storage(spec.storage), spec.study_name, None, create=False)
    study.pruner = make_pruner(spec, int(spec.extra.get("epochs", 1)))
    lock, objective = lock_of(spec.out_dir), Objective(spec, device, threads)
    done = {"ran": 0, "failed": 0, "surplus": False}
    streak = 0
    while spec.deadline is None or time.time() < spec.deadline:
        lock.acquire()
        objective.lock = lock
        try:
            settle_dead(study, spec.out_dir)
            if taken(study) >= spec.trials:
                break
            study.sampler = sampler_for(spec.seed, len(study.get_trials(deepcopy=False)))
            study.optimize(objective, n_trials=1, catch=(Exception,))
        finally:
            objective._release()
        if objective.surplus:
            done["surplus"] = True
            break
        last = max(study.get_trials(deepcopy=False), key=lambda t: t.number)
        failed = last.state == optuna.trial.TrialState.FAIL
        done["ran"] += 1
        done["failed"] += failed
        streak = streak + 1 if failed else 0
        if on_trial is not None:
            on_trial()
        if streak >= max(spec.trials, 3):
            break
    return done


def _exit_with_parent(parent: int) -> None:
    # a worker whose tune process was killed stops too; its trial is settled on the rerun
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def worker_setup(parent: int, threads: int | None = None) -> None:
    """The start of a spawned worker of tune process ``parent`` (a trial worker,
    or a final run's): import warnings off, exit with the parent, ``threads`` CPU threads."""
    from wavygraph.utils import ignore_import_warnings

    ignore_import_warnings()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    if threads:
        import torch

        torch.set_num_threads(threads)


def _worker(spec: TuneSpec, device: str | None, threads: int | None, parent: int) -> None:
    worker_setup(parent, threads)
    work(spec, device, threads)


def run_trials(spec: TuneSpec, jobs: int, devices: Sequence[str], refresh: Callable[[], None]) -> list[int]:
    """``jobs`` trials at once: one process runs them itself, more run on
    spawned workers (worker ``i`` on ``devices[i % len]``, CPU threads split
    between them) while this process refreshes the progress every second.
    Returns the workers' exit codes."""
    if jobs == 1:
        work(spec, worker_device(devices, 0), None, on_trial=refresh)
        return [0]
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    threads = worker_threads(devices, jobs)
    procs = [ctx.Process(target=_worker, args=(spec, worker_device(devices, i), threads, os.getpid()), daemon=False)
             for i in range(jobs)]
    for p in procs:
        p.start()
    while any(p.is_alive() for p in procs):
        for p in procs:
            p.join(timeout=1.0 / jobs)
        refresh()
    return [p.exitcode for p in procs]


def progress(spec: TuneSpec, study: optuna.Study, show: bool):
    """A tqdm bar (trials that count / pruned / failed / best validation) and its refresh function."""
    from tqdm.auto import tqdm

    from .outputs import write_trials_csv

    bar = tqdm(total=spec.trials, desc="trials", unit="trial", disable=not show, file=sys.stderr,
               dynamic_ncols=True)

    def refresh() -> None:
        c = counts(study)
        bar.n = min(c["done"], spec.trials)
        best = max((t.value for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))),
                   default=None)
        bar.set_postfix_str(f"pruned={c['pruned']} failed={c['failed']}"
                            + (f" best_val={best:.4f}" if best is not None else ""), refresh=False)
        bar.refresh()
        write_trials_csv(study, spec.out_dir)

    refresh()
    return bar, refresh


def tune(spec: TuneSpec, signature: dict, jobs: int = 1, devices: Sequence[str] = (), show: bool = True,
         final_seeds: Sequence[int] = (), final_top: int = 1) -> dict:
    """Create or load the study, run its missing trials, write ``trials.csv``,
    ``best.yaml`` and (``final_seeds``: the ``final_top`` best trials rerun on
    them, ``jobs`` at once) ``final.json``; returns the summary."""
    from .outputs import finish, write_manifest

    quiet_optuna()
    start = time.time()
    with lock_of(spec.out_dir):
        study = open_study(open_storage(spec.storage), spec.study_name, signature, create=True)
        write_manifest(spec, signature)
        clean_stale(spec.out_dir)
    bar, refresh = progress(spec, study, show)
    try:
        codes = run_trials(spec, jobs, list(devices), refresh)
        refresh()
    finally:
        bar.close()
    bad = [c for c in codes if c]
    if bad:
        print(f"wavygraph: {len(bad)} of {jobs} tune workers exited with an error (codes {bad})", file=sys.stderr)
    summary = finish(spec, study, final_seeds, start, final_top, jobs, devices)
    try:
        os.rmdir(os.path.join(spec.out_dir, "tmp"))  # when empty
    except OSError:
        pass
    return summary
