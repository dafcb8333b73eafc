"""wavygraph tune as real processes on the synthetic ``csbm`` graph: a study
killed with SIGKILL after 3 trials finished and rerun with the same command
(8 trials in all, the 3 not rerun), two processes on one storage (the
requested number of trials, none twice), and ``--jobs 2``. No test sleeps
for a set time: each polls for a file with a generous bound."""
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPACE = {
    "train.lr": {"type": "float", "low": 1e-3, "high": 3e-2, "log": True},
    "model.dropout": {"type": "float", "low": 0.0, "high": 0.6},
    "model.residual": {"type": "categorical", "choices": ["diffusion", "light_wave"]},
}
BOUND = 600  # seconds: the generous limit of every wait (never reached on a working study)

pytestmark = pytest.mark.slow


def command(space: Path, out: Path, *args: str, epochs: int = 6) -> list[str]:
    return [sys.executable, "-m", "wavygraph", "tune", str(ROOT / "configs" / "csbm.yaml"), "--space", str(space),
            "data.csbm.preset=small", "model.num_layers=2", f"train.epochs={epochs}", "train.num_threads=1",
            f"out_dir={out}", "--no-progress", *args]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def write_space(folder: Path) -> Path:
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    return path


def rows(out: Path) -> list[dict]:
    with open(out / "trials.csv") as fh:
        return list(csv.DictReader(fh))


def counted(out: Path) -> list[dict]:
    return [r for r in rows(out) if r["state"] in ("COMPLETE", "PRUNED")]


def published(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (out / "trials").glob("*/trial.json")}


def test_killed_study_resumes(tmp_path):
    out, space = tmp_path / "study", write_space(tmp_path)
    cmd = command(space, out, "--trials", "8", epochs=30)
    first = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + BOUND
    while len(list((out / "trials").glob("*/trial.json"))) < 3:  # poll: 3 trials finished
        assert first.poll() is None and time.time() < deadline
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = {name: (out / "trials" / name / "trial.json").stat().st_mtime_ns for name in published(out)}
    assert len(before) >= 3
    second = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=BOUND)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout.splitlines()[0])
    assert summary["complete"] + summary["pruned"] == 8
    done = counted(out)
    assert len(done) == 8 and len({r["number"] for r in done}) == 8
    records = published(out)
    assert set(records) == {r["number"] for r in done}  # one folder per counted trial, none for a failed one
    for name, mtime in before.items():  # the finished trials were not rerun
        assert (out / "trials" / name / "trial.json").stat().st_mtime_ns == mtime
        assert records[name]["pid"] == first.pid
    assert sum(r["pid"] == first.pid for r in records.values()) == len(before)
    for r in rows(out):  # a trial the kill interrupted failed and was rerun with its parameters
        if r["state"] == "FAIL":
            retry = next(x for x in rows(out) if x["retry_of"] == r["number"])
            assert [retry[k] for k in SPACE] == [r[k] for k in SPACE]
    assert not (out / "tmp").exists()  # the killed trial's temporary folder was cleaned


def test_two_processes_share_one_storage(tmp_path):
    """Two processes, as on two machines: one storage, each its own out_dir."""
    space, storage = write_space(tmp_path), f"sqlite:///{tmp_path / 'shared.db'}"
    procs = [subprocess.Popen(command(space, tmp_path / f"m{i}", "--trials", "7", "--storage", storage,
                                      "--study-name", "shared"), env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=BOUND) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    final = counted(tmp_path / "m0") if (tmp_path / "m0" / "trials.csv").stat().st_mtime_ns >= \
        (tmp_path / "m1" / "trials.csv").stat().st_mtime_ns else counted(tmp_path / "m1")
    assert len(final) == 7
    folders = [set(published(tmp_path / f"m{i}")) for i in range(2)]
    assert not folders[0] & folders[1]  # no trial run twice
    assert folders[0] | folders[1] == {r["number"] for r in final}


def test_jobs_run_trials_in_worker_processes(tmp_path):
    out, space = tmp_path / "jobs", write_space(tmp_path)
    proc = subprocess.Popen(command(space, out, "--trials", "5", "--jobs", "2"), env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=BOUND)
    assert proc.returncode == 0, err
    done = counted(out)
    assert len(done) == 5 and set(published(out)) == {r["number"] for r in done}
    pids = {r["pid"] for r in published(out).values()}
    assert pids and proc.pid not in pids  # run by the workers (which of them: however they raced)
    assert yaml.safe_load((out / "best.yaml").read_text())["train"]["num_threads"] == 1
