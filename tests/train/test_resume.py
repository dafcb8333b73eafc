"""Checkpoints and resume: a SIGKILLed `wavygraph train` resumed with
train.resume=true ends with the same scores as an uninterrupted run."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from wavygraph import cli
from wavygraph.config import ConfigError, load_config
from wavygraph.train import run
from wavygraph.train.run_folder import work_dir_of

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


#: ``wavygraph train ARGS`` that SIGKILLs itself right after writing the
#: checkpoint of epoch KILL_AT: a kill at a known point, no timing.
KILLING_TRAIN = """
import os, signal, sys
from wavygraph import cli
from wavygraph.train import loop

real = loop.save_checkpoint

def save_then_die(job):
    real(job)
    if job.state.epoch == int(os.environ["KILL_AT"]):
        os.kill(os.getpid(), signal.SIGKILL)

loop.save_checkpoint = save_then_die
sys.exit(cli.main(["train", *sys.argv[1:]]))
"""


@pytest.mark.slow  # three training runs, two of them in fresh processes
def test_sigkill_then_resume_matches_uninterrupted(tmp_path):
    args = SMALL + ["train.epochs=40", "train.checkpoint_every=5", "train.num_threads=1"]
    ref = run(load_config(None, args + [f"out_dir={tmp_path / 'ref'}"]))

    out = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", KILLING_TRAIN, *args, f"out_dir={out}"],
                          env={**_env(), "KILL_AT": "15"}, capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert not out.exists()  # published only when the run ends
    work = Path(work_dir_of(out))  # the interrupted run is kept beside out_dir
    assert _ckpt_epoch(work / "checkpoint.pt") == 15  # a complete file: written atomically
    assert [p.name for p in work.iterdir() if p.name.startswith(".")] == []  # no temporary file left

    cmd = [sys.executable, "-m", "wavygraph", "train", *args, f"out_dir={out}"]
    res = subprocess.run(cmd + ["train.resume=true"], env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"resuming {out} after epoch 15" in res.stderr
    resumed = json.loads((out / "metrics.json").read_text())
    for key in SCORES:
        assert resumed[key] == ref[key], key
    assert not work.exists()  # published as out


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


def test_config_diff_old_checkpoints():
    """A checkpoint written before keys were added (or with train.device=cpu,
    the old default) resumes under today's defaults; a real change differs."""
    from wavygraph.train.env import resolve_device
    from wavygraph.train.resume import config_diff

    saved = {"model": {"num_layers": 2}, "train": {"device": "cpu"}}
    now = {"model": {"num_layers": 2, "reversible": False, "gradient_checkpointing": True},
           "train": {"device": "auto"}}
    expected = [] if str(resolve_device("auto")) == "cpu" else ["train.device"]
    assert config_diff(saved, now) == expected
    now["model"]["reversible"] = True
    now["model"]["num_layers"] = 3
    assert config_diff(saved, now) == sorted(["model.num_layers", "model.reversible"] + expected)
