"""Checkpoints and resume: a SIGKILLed `wavygraph train` resumed with
train.resume=true ends with the same scores as an uninterrupted run."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from wavygraph import cli
from wavygraph.config import ConfigError, load_config
from wavygraph.train import run

SMALL = ["data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=300", "model.num_layers=2",
         "model.hidden_channels=8", "train.batch_size=100", "train.progress=false", "train.diagnostics=false",
         "model.dropout=0.3", "train.lr=0.01"]
SCORES = ("best_val", "test", "train", "best_epoch", "epochs", "history")


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _ckpt_epoch(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)["epoch"]
    except Exception:
        return None


def test_sigkill_then_resume_matches_uninterrupted(tmp_path):
    args = SMALL + ["train.epochs=300", "train.checkpoint_every=5", "train.num_threads=1"]
    ref = run(load_config(None, args + [f"out_dir={tmp_path / 'ref'}"]))

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "wavygraph", "train", *args, f"out_dir={out}"]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ckpt = out / "checkpoint.pt"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if ckpt.exists() and (_ckpt_epoch(ckpt) or 0) >= 10:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "metrics.json").exists()
    killed_at = _ckpt_epoch(ckpt)
    assert killed_at is not None and 10 <= killed_at < 300  # a complete file: written atomically

    res = subprocess.run(cmd + ["train.resume=true"], env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"resuming {out} after epoch" in res.stderr
    resumed = json.loads((out / "metrics.json").read_text())
    for key in SCORES:
        assert resumed[key] == ref[key], key


def test_resume_of_a_finished_run_changes_nothing(tmp_path):
    args = SMALL + ["train.epochs=6", "train.checkpoint_every=2", f"out_dir={tmp_path}"]
    first = run(load_config(None, args))
    again = run(load_config(None, args + ["train.resume=true"]))
    for key in SCORES:
        assert again[key] == first[key], key


def test_checkpoint_of_another_config_is_refused(tmp_path, capsys):
    args = SMALL + ["train.epochs=2", "train.checkpoint_every=1", f"out_dir={tmp_path}"]
    run(load_config(None, args))
    argv = ["train", *args, "model.hidden_channels=16", "train.lr=0.02", "--resume"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "model.hidden_channels" in err and "train.lr" in err


def test_resume_without_checkpoint_starts_fresh_and_needs_checkpoint_every(tmp_path, capsys):
    with pytest.raises(ConfigError, match="checkpoint_every"):
        load_config(None, SMALL + ["train.resume=true"])
    m = run(load_config(None, SMALL + ["train.epochs=2", "train.checkpoint_every=1", "train.resume=true",
                                       f"out_dir={tmp_path}"]))
    assert m["epochs"] == 2 and "no checkpoint" in capsys.readouterr().err


def test_corrupt_checkpoint_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    argv = ["train", *SMALL, "train.epochs=2", "train.checkpoint_every=1", f"out_dir={tmp_path}", "--resume"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "checkpoint" in err
