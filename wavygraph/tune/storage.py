"""Where a study lives and which of its trials count.

``--storage``: an SQLite file in ``out_dir`` by default (``study.db``), any
SQLAlchemy URL Optuna's :class:`~optuna.storages.RDBStorage` takes
(``sqlite:///PATH``, ``postgresql://...``, ``mysql+pymysql://...``), or
``journal:PATH``, Optuna's :class:`~optuna.storages.JournalStorage` on a file
(for a shared file system without a database server).

A trial counts once it is COMPLETE or PRUNED. A RUNNING trial is *live*
while the process that runs it is: every trial records its host, process id
and the process's start time; on the same host a RUNNING trial whose process
is gone (``kill -9``, a crash, a lost machine) is recovered from its
published folder when it had finished, else marked FAIL and its parameters
enqueued once more (the rerun). RDB storages also keep Optuna's heartbeat,
so that a trial of a dead process on another machine is failed (and rerun)
after :data:`GRACE_SECONDS`.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import socket
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from wavygraph import utils

from .space import SpaceError

STUDY_DB = "study.db"
HEARTBEAT_SECONDS = 60
GRACE_SECONDS = 180
#: a trial asked for but not yet labelled with its process is live this long
UNLABELLED_SECONDS = 120
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)
ATTEMPTS = 5  # tries to open an RDB storage


def default_storage(out_dir: str) -> str:
    return f"sqlite:///{os.path.abspath(os.path.join(out_dir, STUDY_DB))}"


def check_storage_url(url: str, given: bool = True) -> None:
    """A ``--storage`` Optuna can open: ``journal:PATH`` whose folder can be
    made, or ``SCHEME://...`` whose database driver loads and, for an SQLite
    file the user ``given``, whose folder exists. Connects to nothing."""
    from wavygraph.utils import folder_problem

    if url.startswith("journal:"):
        if not url[len("journal:"):]:
            raise SpaceError("--storage journal:PATH needs a file path")
        problem = folder_problem(os.path.dirname(os.path.abspath(url[len("journal:"):])), "--storage")
        if problem:
            raise SpaceError(f"{problem} (the journal file's folder)")
        return
    if not re.match(r"^[a-z][a-z0-9+]*://", url):
        raise SpaceError(f"--storage {url!r} is neither an SQLAlchemy URL (sqlite:///PATH, postgresql://..., "
                         "mysql://...) nor journal:PATH")
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
        parsed.get_dialect()
    except Exception as exc:  # an unknown scheme, a driver that is not installed, a malformed URL
        raise SpaceError(f"cannot open --storage {masked(url)}: {type(exc).__name__}: {exc}") from None
    if given and parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        folder = os.path.dirname(os.path.abspath(parsed.database))
        if not os.path.isdir(folder):
            raise SpaceError(f"--storage {masked(url)}: the folder {folder} does not exist; create it or name an "
                             "SQLite file in an existing folder")


def masked(url: str) -> str:
    """The URL without its password (for files and printed lines)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def open_storage(url: str):
    """The Optuna storage of ``url`` (see the module docstring)."""
    if url.startswith("journal:"):
        path = url[len("journal:"):]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            from optuna.storages.journal import JournalFileBackend
        except ImportError:  # Optuna < 4
            from optuna.storages import JournalFileStorage as JournalFileBackend
        return optuna.storages.JournalStorage(JournalFileBackend(path))
    import inspect

    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None
    # the callback's name since Optuna 4.9 (the old one is deprecated there)
    names = inspect.signature(optuna.storages.RDBStorage).parameters
    callback = "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in names else \
        "failed_trial_callback"
    for attempt in range(ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine, heartbeat_interval=HEARTBEAT_SECONDS,
                                              grace_period=GRACE_SECONDS, **{callback: retry_failed})
        except ImportError as exc:  # the database's driver is not installed
            raise SpaceError(f"cannot open --storage {masked(url)}: {exc}") from None
        except Exception as exc:  # e.g. two processes creating the tables at once: the second tries again
            if attempt == ATTEMPTS - 1:
                raise SpaceError(f"cannot open --storage {masked(url)}: {type(exc).__name__}: "
                                 f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}") from None
            time.sleep(0.5 * (attempt + 1))


def open_study(storage, name: str, signature: dict | None, create: bool) -> optuna.Study:
    """Create (``create``) or load the study ``name``; one that holds
    another search than ``signature`` (base config, overrides or space) is a
    :class:`SpaceError` (``None``: not checked). A study that records its
    signature for the first time queues the signature's ``starts`` (the
    space's starting points) as its first trials."""
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize", load_if_exists=True) \
        if create else optuna.load_study(study_name=name, storage=storage)
    if signature is None:
        return study
    held = study.user_attrs.get("search")
    if held is None:  # a new study: it records its search and queues the space's starts, once
        study.set_user_attr("search", signature)
        for i, start in enumerate(signature.get("starts", [])):
            study.enqueue_trial(start, user_attrs={"start": i}, skip_if_exists=False)
    elif held != signature:
        differ = sorted(k for k in set(held) | set(signature) if held.get(k) != signature.get(k))
        if differ == ["data"]:
            files = ", ".join(f"data.{k}" for k in sorted(set(held.get("data") or {}) | set(signature["data"] or {})))
            raise SpaceError(f"study {name!r} was started on another version of the graph file ({files}); restore "
                             "that file, or use another out_dir or --study-name for the new data")
        raise SpaceError(f"study {name!r} in the storage holds another search ({', '.join(differ)} differ); "
                         "use another out_dir or --study-name, or the command that started it")
    return study


def process_token(pid: int) -> str:
    """The start time of process ``pid`` (Linux ``/proc``), which tells a
    reused process id apart; ``""`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def pid_alive(pid: int, token: str = "") -> bool:
    """Whether process ``pid`` runs on this host and, given its start
    ``token``, is the same process (not a later one with a reused pid)."""
    if not utils.pid_alive(pid):
        return False
    return not token or not process_token(pid) or process_token(pid) == token


def label(trial: optuna.Trial) -> None:
    """Record which process runs ``trial`` (see :func:`is_live`)."""
    pid = os.getpid()
    trial.set_user_attr("process", {"host": socket.gethostname(), "pid": pid, "token": process_token(pid)})


def is_live(t: optuna.trial.FrozenTrial) -> bool:
    """Whether a RUNNING trial's process may still run it: on this host its
    process is alive; on another host, yes (until Optuna's heartbeat fails
    it); without a label, only just after it was asked for."""
    proc = t.user_attrs.get("process")
    if proc is None:
        start = t.datetime_start or datetime.datetime.now()
        return (datetime.datetime.now() - start).total_seconds() < UNLABELLED_SECONDS
    if proc.get("host") != socket.gethostname():
        return True
    return pid_alive(int(proc["pid"]), proc.get("token", ""))


def counts(study: optuna.Study) -> dict:
    """``{"complete", "pruned", "failed", "running", "waiting", "done"}`` (done: complete + pruned)."""
    out = {"complete": 0, "pruned": 0, "failed": 0, "running": 0, "waiting": 0}
    names = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed",
             TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.FAIL and t.user_attrs.get("surplus"):
            continue
        out[names[t.state]] += 1
    out["done"] = out["complete"] + out["pruned"]
    return out


def taken(study: optuna.Study, below: int | None = None) -> int:
    """Trials that count or will (COMPLETE, PRUNED, live RUNNING), optionally only those numbered below ``below``."""
    return sum(1 for t in study.get_trials(deepcopy=False)
               if (below is None or t.number < below)
               and (t.state in COUNTED or (t.state == TrialState.RUNNING and is_live(t))))


def retry_failed(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Enqueue the parameters of a trial whose process died, once."""
    if trial.user_attrs.get("surplus") or any(t.user_attrs.get("retry_of") == trial.number
                                              for t in study.get_trials(deepcopy=False)):
        return
    study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number}, skip_if_exists=False)


def _published(out_dir: str, number: int) -> dict | None:
    path = Path(out_dir) / "trials" / str(number) / "trial.json"
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def settle_dead(study: optuna.Study, out_dir: str) -> int:
    """Settle the RUNNING trials of dead processes: one whose folder was
    published (the process died between publishing and telling the storage)
    is told as its folder says; any other is marked FAIL and rerun
    (:func:`retry_failed`). Returns how many were settled."""
    storage, settled = study._storage, 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if is_live(t):
            continue
        record = _published(out_dir, t.number)
        try:
            if record is not None and record.get("state") in ("COMPLETE", "PRUNED"):
                for key in ("val", "test", "best_epoch", "seconds"):
                    storage.set_trial_user_attr(t._trial_id, key, record.get(key))
                state = TrialState[record["state"]]
                values = [record["val"]] if state == TrialState.COMPLETE else None
                storage.set_trial_state_values(t._trial_id, state, values)
            else:
                storage.set_trial_user_attr(t._trial_id, "error", "its process died")
                storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
                retry_failed(study, storage.get_trial(t._trial_id))
            settled += 1
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process settled it first
    return settled
