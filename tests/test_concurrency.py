"""Several processes on one fresh data root: the data set's lock
(wavygraph.data.lock) lets the first prepare Cora and the others wait, so
every run succeeds and none reads a half-written file.

Real ``wavygraph`` processes started together on a fresh copy of Cora's raw
files (skipped when the shared copy is absent); slow. The fast lock tests with
real processes are in tests/data/test_lock.py, the two-process download in
tests/data/test_download.py.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CORA_RAW = Path("/work/shared/data/planetoid/Cora/raw")
ONE_EPOCH = ["train.epochs=1", "train.diagnostics=false", "train.progress=false"]

pytestmark = pytest.mark.slow


@pytest.fixture
def fresh_cora(tmp_path) -> Path:
    """A data root holding Cora's raw files only (nothing processed yet)."""
    if not CORA_RAW.is_dir():
        pytest.skip(f"Cora's raw files are not in {CORA_RAW}")
    root = tmp_path / "data"
    shutil.copytree(CORA_RAW, root / "Cora" / "raw")
    return root


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _start(args: list, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "wavygraph", *args], cwd=cwd, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_three_train_runs_on_a_fresh_root_all_succeed(fresh_cora, tmp_path):
    procs = [_start(["train", str(REPO / "configs" / "cora.yaml"), f"data.root={fresh_cora}",
                     f"out_dir={tmp_path / f'run{i}'}", *ONE_EPOCH], tmp_path) for i in range(3)]
    results = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-2000:] for _, err in results]
    summaries = [json.loads(next(line for line in out.splitlines() if line.startswith("{"))) for out, _ in results]
    # the same data, seed and config: the same scores in every run
    assert len({(s["best_val"], s["test"]) for s in summaries}) == 1
    for i in range(3):
        assert (tmp_path / f"run{i}" / "metrics.json").exists()
    assert [e for e in os.listdir(fresh_cora) if not e.endswith(".lock")] == ["Cora"]  # no staging folder left


def test_sweep_with_two_jobs_on_a_fresh_root_succeeds(fresh_cora, tmp_path):
    spec = {
        "base": str(REPO / "configs" / "cora.yaml"),
        "grid": {"model.num_layers": [2, 4], "model.residual": ["diffusion", "light_wave"]},
        "set": {"train.epochs": 1, "train.diagnostics": False},
        "out_dir": str(tmp_path / "sweep"),
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    proc = _start(["sweep", str(tmp_path / "sweep.yaml"), f"data.root={fresh_cora}", "--jobs", "2", "--no-progress"],
                  tmp_path)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-2000:]
    assert "ran 4, already done 0, failed 0" in out and "4/4 cells of the grid present" in out
    assert len(list((tmp_path / "sweep" / "cells").glob("*/metrics.json"))) == 4
