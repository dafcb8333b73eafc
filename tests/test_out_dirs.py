"""An out_dir that cannot be written (a file, under a file, not writable) is
one line `wavygraph: error: ...` naming the key and the fix, exit 2, nothing
written, for train, sweep, report --out and demo --out."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wavygraph import cli
from wavygraph.utils import folder_problem

TRAIN = ["train", "data.name=csbm", "data.csbm.preset=small", "train.epochs=1", "train.progress=false"]
SWEEP = "grid:\n  model.num_layers: [1]\nset: {data.name: csbm, data.csbm.preset: small, train.epochs: 1}\n"


def _report_source(root: Path) -> Path:
    src = root / "src"
    (src / "cells" / "h").mkdir(parents=True)
    rec = {"hash": "h", "params": {"model.num_layers": 1}, "config": {"model": {"num_layers": 1}},
           "metrics": {"metric": "acc", "test": 0.5}}
    (src / "cells" / "h" / "cell.json").write_text(json.dumps(rec))
    return src


def _argvs(tmp_path: Path, where: str) -> dict:
    spec = tmp_path / "sweep.yaml"
    spec.write_text(SWEEP + f"out_dir: {where}\n")
    return {"train": [*TRAIN, f"out_dir={where}"], "sweep": ["sweep", str(spec)],
            "report": ["report", str(_report_source(tmp_path)), "--out", where],
            "demo": ["demo", "--out", where, "--depths", "1", "--seeds", "0", "--epochs", "1"]}


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("command", ["train", "sweep", "report", "demo"])
@pytest.mark.parametrize("where, expected", [("f", "is a file, not a folder"),
                                             ("f/sub", "is a file, so no folder can be made under it")])
def test_out_dir_that_is_or_lies_under_a_file(tmp_path, capsys, command, where, expected):
    (tmp_path / "f").write_text("keep me")
    argv = _argvs(tmp_path, str(tmp_path / where))[command]
    before = _snapshot(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("wavygraph: error: ") and expected in err, err
    assert ("--out" if command in ("report", "demo") else "out_dir=") in err
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("command", ["train", "sweep", "report", "demo"])
def test_out_dir_where_nothing_can_be_written(tmp_path, capsys, monkeypatch, command):
    """Root may write anywhere, so the permission is faked here; the real
    chmod case runs below for other users."""
    argv = _argvs(tmp_path, str(tmp_path / "ro" / "out"))[command]
    (tmp_path / "ro").mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if str(p).endswith("ro") else real(p, mode, **k))
    before = _snapshot(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot write in" in err and "permission denied" in err, err
    assert _snapshot(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_really_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert "cannot write in" in folder_problem(ro / "out", "out_dir")
    finally:
        ro.chmod(0o755)


@pytest.mark.slow  # a fresh process (~10 s of imports on a busy machine)
def test_no_traceback_from_a_fresh_process(tmp_path):
    (tmp_path / "f").write_text("x")
    res = subprocess.run([sys.executable, "-m", "wavygraph", "report", str(_report_source(tmp_path)), "--out",
                          str(tmp_path / "f")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
