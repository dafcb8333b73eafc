"""The run folder of `wavygraph train` is complete or untouched: written in a
work folder beside out_dir and renamed into place when the run ends; an
out_dir that holds a run is refused (--overwrite, a new out_dir, --resume)."""
import fcntl
import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wavygraph import cli
from wavygraph.config import ConfigError, load_config
from wavygraph.train import loop, run
from wavygraph.train.run_folder import plan, work_dir_of

SMALL = ["data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=300", "model.num_layers=2",
         "model.hidden_channels=8", "train.progress=false", "train.diagnostics=false", "train.lr=0.01",
         "train.num_threads=1"]


def _cfg(out, *extra):
    return load_config(None, SMALL + ["train.epochs=3", f"out_dir={out}", *extra])


def _files(folder):
    return {p.name: p.read_bytes() for p in Path(folder).iterdir()}


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("wavygraph: error: "), err
    return err


def _env():
    # faulthandler: a child that hangs dumps its threads' stacks on SIGABRT (see _wait_or_dump)
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}


def _wait_or_dump(proc, timeout=120.0):
    """Wait for the child; one that has not ended after ``timeout`` s (a generous bound, not a timing) is
    aborted so that its Python stacks reach the failure message."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=60)
        pytest.fail(f"the child did not end within {timeout} s; its stacks:\n{err[-6000:]}")


def _poll(condition, what, proc, timeout=120.0):
    """Wait until ``condition()`` (a generous bound, not a timing)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the child ended before {what}: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.05)


def test_second_run_into_a_finished_folder_is_refused_and_changes_nothing(tmp_path, capsys):
    out = tmp_path / "r"
    run(_cfg(out))
    before = _files(out)
    assert sorted(before) == ["config.yaml", "metrics.json", "model.pt"]
    assert cli.main(["train", *SMALL, "train.epochs=3", "train.seed=1", f"out_dir={out}"]) == 2
    err = _one_line_error(capsys)
    assert f"out_dir={out} already holds a finished run" in err and "--overwrite" in err and "--resume" in err
    # --resume without a checkpoint to continue from must not overwrite it either
    argv = ["train", *SMALL, "train.epochs=3", "train.checkpoint_every=1", f"out_dir={out}", "--resume"]
    assert cli.main(argv) == 2
    assert "no checkpoint.pt" in _one_line_error(capsys)
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no work folder left


def test_overwrite_replaces_the_run_when_it_ends(tmp_path, capsys):
    out = tmp_path / "r"
    run(_cfg(out))
    before = _files(out)
    assert cli.main(["train", *SMALL, "train.epochs=3", "train.seed=1", f"out_dir={out}", "--overwrite"]) == 0
    after = _files(out)
    assert sorted(after) == sorted(before) and after["model.pt"] != before["model.pt"]
    assert "seed: 1" in after["config.yaml"].decode() and f"out_dir: {out}" in after["config.yaml"].decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no work or replaced folder left
    # options may come between the overrides, as for sweep and tune
    assert cli.main(["train", *SMALL, "--overwrite", "train.epochs=2", f"out_dir={out}"]) == 0
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 2


def test_out_dir_problems_are_one_line_and_write_nothing(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    cases = {"file": "is a file", "file/sub/run": "is a file, so no folder", "other": "not a wavygraph run"}
    for rel, expected in cases.items():
        assert cli.main(["train", *SMALL, "train.epochs=1", f"out_dir={tmp_path / rel}"]) == 2
        err = _one_line_error(capsys)
        assert expected in err and "out_dir=" in err, err
        with pytest.raises(ConfigError, match=expected):
            plan(_cfg(tmp_path / rel), overwrite=True)  # --overwrite never replaces these
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "other"]
    assert (tmp_path / "file").read_text() == "x" and os.listdir(tmp_path / "other") == ["notes.txt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_out_dir_in_a_read_only_folder_is_refused(tmp_path, capsys):
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert cli.main(["train", *SMALL, "train.epochs=1", f"out_dir={locked / 'run'}"]) == 2
        assert "cannot write in" in _one_line_error(capsys)
    finally:
        locked.chmod(0o755)


def test_interrupted_run_keeps_out_dir_and_its_checkpoint_for_resume(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r"
    run(_cfg(out))
    before = _files(out)
    real = loop.train_epoch
    calls = []

    def interrupt_at_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train_epoch", interrupt_at_third)
    args = ["train", *SMALL, "train.epochs=4", "train.checkpoint_every=1", f"out_dir={out}"]
    assert cli.main(args + ["--overwrite"]) == 130  # Ctrl-C
    assert _files(out) == before
    work = Path(work_dir_of(out))
    assert (work / "checkpoint.pt").is_file() and "--resume" in capsys.readouterr().err
    monkeypatch.setattr(loop, "train_epoch", real)
    assert cli.main(args) == 2  # neither --resume nor --overwrite: the checkpoint is not discarded silently
    assert "interrupted run" in _one_line_error(capsys)
    assert cli.main(args + ["--resume"]) == 2  # it would replace the finished run: --overwrite says so
    assert "would replace" in _one_line_error(capsys)
    assert _files(out) == before
    (work / ".checkpoint.pt.x1y2z3.tmp").write_bytes(b"half")  # a checkpoint write that kill -9 cut short
    assert cli.main(args + ["--resume", "--overwrite"]) == 0
    assert "resuming" in capsys.readouterr().err and not work.exists()
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 4
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "config.yaml", "metrics.json", "model.pt"]


def test_leftover_without_checkpoint_is_discarded_and_a_live_run_is_refused(tmp_path, capsys):
    out = tmp_path / "r"
    work = Path(work_dir_of(out))
    work.mkdir()
    (work / "config.yaml").write_text("half: a run killed before its first checkpoint\n")
    fd = os.open(work, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a running train process holds it
    try:
        assert cli.main(["train", *SMALL, "train.epochs=1", f"out_dir={out}"]) == 2
        assert "another run is writing" in _one_line_error(capsys)
    finally:
        os.close(fd)
    run(_cfg(out))  # the lock released: the leftover holds nothing to continue
    assert sorted(os.listdir(out)) == ["config.yaml", "metrics.json", "model.pt"] and not work.exists()


def test_non_finite_scores_are_null_in_metrics_json(tmp_path, monkeypatch):
    nan = float("nan")
    monkeypatch.setattr(loop, "evaluate", lambda *a, **k: {"train": nan, "val": nan, "test": nan})
    m = run(_cfg(tmp_path / "r"))
    assert m["best_val"] == -math.inf and math.isnan(m["test"])
    text = (tmp_path / "r" / "metrics.json").read_text()
    metrics = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in metrics.json"))
    assert metrics["best_val"] is None and metrics["test"] is None and metrics["history"][0]["val"] is None


def test_run_folder_and_files_get_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        run(_cfg(tmp_path / "r", "train.checkpoint_every=1"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "r").st_mode) == 0o775
    for name in ("config.yaml", "model.pt", "metrics.json", "checkpoint.pt"):
        assert stat.S_IMODE(os.stat(tmp_path / "r" / name).st_mode) == 0o664, name


@pytest.mark.slow  # two fresh processes
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_run_leaves_the_finished_folder_byte_for_byte(tmp_path, sig):
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "wavygraph", "train", *SMALL, f"out_dir={out}"]
    first = subprocess.run(cmd + ["train.epochs=3"], env=_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    before = _files(out)
    again = subprocess.run(cmd + ["train.epochs=3"], env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "already holds" in again.stderr
    assert _files(out) == before

    work = Path(work_dir_of(out))
    # Ctrl-C's default action in the child, even where this test runs with SIGINT ignored (a background job of a
    # shell without job control, or nohup): a child inherits the ignored SIGINT and Python then keeps ignoring it
    proc = subprocess.Popen(cmd + ["train.epochs=100000", "--overwrite"], env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _poll(lambda: (work / "config.yaml").is_file(), "config.yaml in the work folder", proc)
        proc.send_signal(sig)
        _wait_or_dump(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 130), proc.stderr.read()[-2000:]
    assert _files(out) == before
    assert work.exists() == (sig == signal.SIGKILL)  # Ctrl-C removes a work folder without checkpoint
