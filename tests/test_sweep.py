"""wavygraph.sweep: grid expansion, the atomic resumable store, shards, jobs,
and SIGKILL at chosen points of a cell.

Most tests use ``fake_run`` below (set through ``WAVYGRAPH_SWEEP_RUNNER``): a
deterministic stand-in for ``wavygraph.train.run`` that writes the same files
one by one, so the store is tested without training (tests/test_demo.py runs
the real trainer through a sweep). ``fake_run`` kills its own
process (SIGKILL) where the environment variable :data:`KILL_ENV` says: no
test depends on timing.
"""
import json
import os
import signal
import subprocess
import sys
from hashlib import sha256
from pathlib import Path

import pytest
import yaml

from wavygraph import keys
from wavygraph import sweep as sw

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FAKE = "test_sweep:fake_run"
#: ``"K:PHASE"``: ``fake_run`` sends SIGKILL to its own process in the K-th
#: cell (0-based) that process runs, at PHASE ``start`` (nothing written),
#: ``mid`` (config.yaml and part of model.pt written) or ``end`` (every file
#: written, the runner about to return, the cell not yet published).
KILL_ENV = "WAVYGRAPH_TEST_KILL"
_CELLS_RUN: dict[int, int] = {}  # pid -> cells fake_run started in that process


def _maybe_kill(phase: str) -> None:
    plan = os.environ.get(KILL_ENV)
    if not plan:
        return
    index, when = plan.split(":")
    if when == phase and _CELLS_RUN[os.getpid()] == int(index) + 1:
        os.kill(os.getpid(), signal.SIGKILL)


def fake_run(cfg) -> dict:
    """Deterministic metrics from (depth, residual, seed, epochs), written
    file by file like the real trainer (see :data:`KILL_ENV`)."""
    from omegaconf import OmegaConf

    _CELLS_RUN[os.getpid()] = _CELLS_RUN.get(os.getpid(), 0) + 1
    _maybe_kill("start")
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    key = f"{cfg.model.num_layers}/{cfg.model.residual}/{cfg.train.seed}/{cfg.train.epochs}"
    u = int(sha256(key.encode()).hexdigest()[:8], 16) / 2**32
    depth = cfg.model.num_layers
    score = (0.8 if cfg.model.residual != "diffusion" else 0.8 / (1 + depth / 8)) - 0.05 * u
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    for part in range(3):
        with open(out / "model.pt", "ab") as fh:
            fh.write(b"x" * 1000)
        if part == 1:
            _maybe_kill("mid")
    metrics = {"metric": "accuracy", "test": score, "best_val": score + 0.01, "best_epoch": 1,
               "epochs": cfg.train.epochs, "seconds": 0.0, "num_params": 10 * depth}
    if cfg.train.diagnostics:
        metrics["diagnostics"] = {"cosine_similarity": [min(1.0, 0.1 * i * (1 + u)) for i in range(depth + 1)],
                                  "spectral_gap": [0.5 + 0.01 * i for i in range(depth)]}
    (out / "metrics.json").write_text(json.dumps(metrics))
    _maybe_kill("end")
    return metrics


@pytest.fixture
def fake_runner(monkeypatch):
    monkeypatch.setenv(sw.RUNNER_ENV, FAKE)
    monkeypatch.syspath_prepend(str(TESTS))


def write_sweep(tmp_path: Path, grid=None, sett=None, name="sweep.yaml") -> Path:
    (tmp_path / "configs").mkdir(exist_ok=True)
    (tmp_path / "configs" / "base.yaml").write_text(
        "data:\n  name: csbm\n  csbm:\n    preset: small\nmodel:\n  hidden_channels: 8\ntrain:\n  epochs: 2\n"
    )
    spec = {
        "base": "../configs/base.yaml",
        "grid": grid or {"model.num_layers": [1, 2, 4], "model.residual": ["diffusion", "wave"], "train.seed": [0, 1]},
        "set": sett or {"train.epochs": 2},
        "out_dir": str(tmp_path / "out"),
    }
    (tmp_path / "sweeps").mkdir(exist_ok=True)
    path = tmp_path / "sweeps" / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def store_listing(out: Path) -> dict:
    """hash -> (params, test score) of every complete cell; asserts each is whole."""
    listing = {}
    for d in sorted((out / "cells").iterdir()):
        rec = json.loads((d / "cell.json").read_text())
        assert rec["hash"] == d.name
        assert (d / "metrics.json").is_file() and (d / "config.yaml").is_file()
        assert (d / "model.pt").stat().st_size == 3000, d
        listing[d.name] = (rec["params"], rec["metrics"]["test"])
    return listing


def test_load_and_expand(tmp_path):
    path = write_sweep(tmp_path)
    sweep = sw.load_sweep(str(path))
    assert sweep.base == str(tmp_path / "configs" / "base.yaml")  # relative to the sweep file
    cells = sw.expand(sweep)
    assert len(cells) == 12 and len({c.hash for c in cells}) == 12
    assert [c.hash for c in cells] == sorted(c.hash for c in cells)
    cell = next(c for c in cells if c.params == {"model.num_layers": 4, "model.residual": "wave", "train.seed": 1})
    assert cell.config["model"]["num_layers"] == 4 and cell.config["train"]["epochs"] == 2
    assert cell.config["data"]["csbm"]["preset"] == "small" and cell.config["model"]["hidden_channels"] == 8
    # command-line overrides: every cell, grid list replaced, out_dir
    sweep2 = sw.load_sweep(str(path), ["train.epochs=3", "grid.model.num_layers=[1,8]", "out_dir=elsewhere"])
    cells2 = sw.expand(sweep2)
    assert len(cells2) == 8 and sweep2.out_dir == "elsewhere"
    assert {c.config["train"]["epochs"] for c in cells2} == {3}
    assert {c.params["model.num_layers"] for c in cells2} == {1, 8}
    # the hash is stable and ignores where the run goes, its device and data root
    again = sw.expand(sw.load_sweep(str(path), ["out_dir=x", "train.device=cpu:0", "data.root=/elsewhere"]))
    assert [c.hash for c in again] == [c.hash for c in cells]
    assert sw.cell_hash({"a": 1, "b": {"c": 2}}) == sw.cell_hash({"b": {"c": 2}, "a": 1})
    assert sw.cell_hash({"a": 1}) != sw.cell_hash({"a": 2})
    # thread count and checkpointing do not change the cell; distributed training does
    same = sw.expand(sw.load_sweep(str(path), ["train.num_threads=2", "train.checkpoint_every=5"]))
    assert [c.hash for c in same] == [c.hash for c in cells]
    other = sw.expand(sw.load_sweep(str(path), ["train.distributed=true", "train.batch_size=64"]))
    assert not {c.hash for c in other} & {c.hash for c in cells}


def test_the_hash_is_pinned():
    """The hash of a fixed config never changes (folders of earlier versions
    stay valid): this value was printed by the single-module sweep.py that
    preceded the subpackage, and equals the sha256 of the canonical JSON."""
    cfg = {"data": {"name": "cora", "root": "/x"}, "model": {"num_layers": 4, "residual": "wave", "tau": 0.5,
           "graph_weight": None}, "train": {"seed": 1, "device": "cpu", "distributed": False, "lr": 0.001},
           "out_dir": "runs/a"}
    assert sw.cell_hash(cfg) == "b78e9cd1e50e00b8"
    kept = {"data": {"name": "cora"}, "model": cfg["model"], "train": {"seed": 1, "lr": 0.001}}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    assert sw.cell_hash(cfg) == sha256(text.encode()).hexdigest()[:16]


def test_an_option_added_later_leaves_old_hashes_alone(monkeypatch):
    """A key added later (keys.Added) at its listed value hashes as if it did not exist
    (a folder from before the option still matches); any other value counts."""
    old = {"model": {"num_layers": 4}, "train": {"seed": 0}}
    monkeypatch.setitem(keys.NEUTRAL_KEYS, "model.new_option", keys.Added("off"))
    assert sw.cell_hash({**old, "model": {"num_layers": 4, "new_option": "off"}}) == sw.cell_hash(old)
    assert sw.cell_hash({**old, "model": {"num_layers": 4, "new_option": "on"}}) != sw.cell_hash(old)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["model.num_layers=3"], "grid key"),
        (["model.nope=3"], "unknown config key"),
        (["grid.model.residual=[]"], "non-empty list"),
        (["grid.model.residual=[diffusion,bogus]"], "bogus"),
        (["notakeyvalue"], "key=value"),
    ],
)
def test_bad_overrides_raise(tmp_path, overrides, match):
    path = write_sweep(tmp_path)
    with pytest.raises(ValueError, match=match):
        sw.expand(sw.load_sweep(str(path), overrides))


def test_bad_sweep_files(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("grid: {model.num_layers: [2]}\nout_dir: o\nextra: 1\n")
    with pytest.raises(sw.SweepError, match="unknown key"):
        sw.load_sweep(str(path))
    path.write_text("grid: {model.num_layers: [2]}\n")
    with pytest.raises(sw.SweepError, match="out_dir"):
        sw.load_sweep(str(path))
    with pytest.raises(sw.SweepError, match="not found"):
        sw.load_sweep(str(tmp_path / "missing.yaml"))
    for bad in ("1/1", "0/0", "a/b", "2"):
        with pytest.raises(sw.SweepError):
            sw.parse_shard(bad)
    assert sw.parse_shard("1/3") == (1, 3)


def test_shards_are_disjoint_and_cover(tmp_path):
    cells = sw.expand(sw.load_sweep(str(write_sweep(tmp_path))))
    parts = [sw.shard_cells(cells, i, 3) for i in range(3)]
    hashes = [c.hash for p in parts for c in p]
    assert sorted(hashes) == sorted(c.hash for c in cells) and len(set(hashes)) == len(cells)
    assert sw.shard_cells(list(reversed(cells)), 1, 3) == parts[1]  # same whatever the order


def test_run_skip_and_failures(tmp_path, fake_runner, monkeypatch):
    sweep = sw.load_sweep(str(write_sweep(tmp_path)))
    logs = []
    counts = sw.run_sweep(sweep, progress=False, log=logs.append)
    assert counts["done"] == 12 and counts["skipped"] == 0 and counts["failed"] == 0
    first = store_listing(tmp_path / "out")
    assert len(first) == 12
    assert "12/12 cells" in "\n".join(logs) and "| layers |" in "\n".join(logs)
    assert not any((tmp_path / "out" / "tmp").iterdir())
    # the config.yaml of a cell names its final folder
    some = next((tmp_path / "out" / "cells").iterdir())
    assert f"out_dir: {some}" in (some / "config.yaml").read_text()
    # rerun: everything skipped, nothing rewritten
    stamp = {d.name: (d / "cell.json").stat().st_mtime_ns for d in (tmp_path / "out" / "cells").iterdir()}
    counts = sw.run_sweep(sweep, progress=False, log=logs.append)
    assert counts["done"] == 0 and counts["skipped"] == 12
    assert stamp == {d.name: (d / "cell.json").stat().st_mtime_ns for d in (tmp_path / "out" / "cells").iterdir()}
    # a failing cell is absent, recorded in failed/, and the others still run
    sweep2 = sw.load_sweep(str(write_sweep(tmp_path)), ["grid.model.num_layers=[1,3]", "out_dir=" + str(tmp_path / "o2")])
    monkeypatch.setenv(sw.RUNNER_ENV, "test_sweep:failing_run")
    counts = sw.run_sweep(sweep2, progress=False, log=logs.append)
    assert counts["failed"] == 4 and counts["done"] == 4
    assert len(list((tmp_path / "o2" / "cells").iterdir())) == 4
    assert len(list((tmp_path / "o2" / "failed").iterdir())) == 4
    assert not any((tmp_path / "o2" / "tmp").iterdir())
    monkeypatch.setenv(sw.RUNNER_ENV, FAKE)
    counts = sw.run_sweep(sweep2, progress=False, log=logs.append)
    assert counts["done"] == 4 and counts["skipped"] == 4
    assert not any((tmp_path / "o2" / "failed").iterdir())


def failing_run(cfg):
    if cfg.model.num_layers == 3:
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        raise RuntimeError("boom")
    return fake_run(cfg)


def test_stale_temp_folders_are_cleaned(tmp_path):
    out = tmp_path / "out"
    (out / "tmp").mkdir(parents=True)
    import socket

    host = socket.gethostname()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    (out / "tmp" / f"aaaa.{host}.{dead_pid}.x1").mkdir()  # this host, dead process: removed
    (out / "tmp" / f"bbbb.{host}.{os.getpid()}.x2").mkdir()  # alive: kept
    (out / "tmp" / f"cccc.otherhost.{dead_pid}.x3").mkdir()  # another machine: kept
    assert sw.clean_stale(out) == 1
    assert sorted(p.name.split(".")[0] for p in (out / "tmp").iterdir()) == ["bbbb", "cccc"]


@pytest.mark.slow  # spawns two workers that import torch and PyG
def test_parallel_jobs_match_serial(tmp_path, fake_runner):
    path = write_sweep(tmp_path, grid={"model.num_layers": [1, 2], "model.residual": ["mix"]})
    serial = sw.load_sweep(str(path), ["out_dir=" + str(tmp_path / "serial")])
    parallel = sw.load_sweep(str(path), ["out_dir=" + str(tmp_path / "par")])
    sw.run_sweep(serial, progress=False, log=lambda s: None)
    counts = sw.run_sweep(parallel, jobs=2, devices=["cpu", "cpu"], progress=False, log=lambda s: None)
    assert counts["done"] == 2 and counts["failed"] == 0
    assert store_listing(tmp_path / "serial") == store_listing(tmp_path / "par")
    hosts_pids = {json.loads(p.read_text())["device"] for p in (tmp_path / "par" / "cells").glob("*/cell.json")}
    assert hosts_pids == {"cpu"}


def test_workers_take_the_devices_in_turn_and_share_the_cores(monkeypatch):
    from wavygraph.utils import worker_device, worker_threads

    assert [worker_device(["cuda:0", "cuda:1"], i) for i in range(5)] == ["cuda:0", "cuda:1", "cuda:0", "cuda:1",
                                                                          "cuda:0"]
    assert worker_device([], 3) is None and worker_device(["cpu"], 7) == "cpu"
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert [worker_threads([], jobs) for jobs in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    assert worker_threads(["cpu", "cpu:0"], 2) == 4
    assert worker_threads(["cuda:0"], 2) is None and worker_threads(["cpu", "cuda:0"], 2) is None
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: one thread each
    assert worker_threads([], 4) == 1


def _env(**extra):
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def _cli(path, *args):
    """``wavygraph sweep PATH ARGS`` in this process (options after the overrides on purpose)."""
    return sw.main([str(path), *args, "--no-progress"])


def _forked_cli(path, *args):
    """The same in a forked child process (starts at once: no fresh imports)."""
    import multiprocessing as mp

    def target():
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            code = _cli(path, *args)
        os._exit(code)

    proc = mp.get_context("fork").Process(target=target)
    proc.start()
    return proc


def report_text(out: Path) -> str:
    from wavygraph.report import load_results, summary_table

    return summary_table(load_results(out))


#: (kill plan, complete cells afterwards, a half-run cell left in tmp/)
KILLS = [("1:start", 1, False), ("0:mid", 1, True), ("2:end", 3, True), ("0:start", 3, False),
         ("3:mid", 6, True)]


def test_sigkill_at_chosen_points_then_resume(tmp_path, fake_runner, monkeypatch, capsys):
    """kill -9 the sweep process before, inside and at the end of a cell, rerun:
    every cell once, the same table as an uninterrupted run."""
    grid = {"model.num_layers": [1, 2, 3, 4], "model.residual": ["diffusion", "wave"], "train.seed": [0, 1]}
    path = write_sweep(tmp_path, grid=grid, sett={"train.epochs": 5})
    out = tmp_path / "out"
    for plan, complete, half_cell in KILLS:
        monkeypatch.setenv(KILL_ENV, plan)
        proc = _forked_cli(path)
        proc.join(timeout=120)
        assert proc.exitcode == -signal.SIGKILL, plan
        assert len(store_listing(out)) == complete, plan  # only complete cells, each whole
        left = sorted(p.name.split(".")[0] for p in (out / "tmp").iterdir())
        assert len(left) == (1 if half_cell else 0), (plan, left)  # the rerun cleaned the earlier ones
    monkeypatch.delenv(KILL_ENV)
    capsys.readouterr()
    assert _cli(path) == 0
    assert "ran 10, already done 6" in capsys.readouterr().out
    listing = store_listing(out)
    assert len(listing) == 16 and len({json.dumps(p, sort_keys=True) for p, _ in listing.values()}) == 16
    assert not any((out / "tmp").iterdir())  # the killed runs' temporary folders are gone
    clean_out = tmp_path / "clean"
    assert _cli(path, f"out_dir={clean_out}") == 0
    assert store_listing(clean_out) == listing
    assert report_text(out) == report_text(clean_out)


def test_two_shards_in_one_folder_equal_one_run(tmp_path, fake_runner, capsys):
    path = write_sweep(tmp_path, grid={"model.num_layers": [1, 2, 3], "model.residual": ["diffusion", "wave"], "train.seed": [0, 1]})
    shared = tmp_path / "shared"
    procs = [_forked_cli(path, f"out_dir={shared}", "--shard", f"{i}/2") for i in range(2)]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    manifest = json.loads((shared / "sweep.json").read_text())
    assert len(manifest["cells"]) == 12
    single = tmp_path / "single"
    assert _cli(path, f"out_dir={single}") == 0
    assert store_listing(shared) == store_listing(single)
    assert report_text(shared) == report_text(single)
    # each shard alone holds its half: disjoint, 6 + 6
    half = tmp_path / "half"
    assert _cli(path, f"out_dir={half}", "--shard", "1/2") == 0
    assert "ran 6, already done 0" in capsys.readouterr().out
    assert len(store_listing(half)) == 6


def test_cli_errors_are_one_line(tmp_path):
    path = write_sweep(tmp_path)
    cmd = [sys.executable, "-m", "wavygraph.sweep", str(path), "model.num_layers=3"]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("wavygraph: error:") and len(res.stderr.strip().splitlines()) == 1


def racing_run(cfg):
    """Another process publishes the same cell while this one trains."""
    metrics = fake_run(cfg)
    tmp = Path(cfg.out_dir)
    other = tmp.parent.parent / "cells" / tmp.name.split(".")[0]
    other.mkdir(parents=True)
    (other / "cell.json").write_text(json.dumps({"winner": "other"}))
    return metrics


def test_a_race_on_one_cell_keeps_the_first(tmp_path, fake_runner, monkeypatch):
    sweep = sw.load_sweep(str(write_sweep(tmp_path, grid={"model.num_layers": [1]})))
    cell = sw.expand(sweep)[0]
    monkeypatch.setenv(sw.RUNNER_ENV, "test_sweep:racing_run")
    res = sw.run_cell(cell, sweep.out_dir)
    assert res["status"] == "duplicate"
    out = Path(sweep.out_dir)
    assert [p.name for p in (out / "cells").iterdir()] == [cell.hash]
    assert json.loads((out / "cells" / cell.hash / "cell.json").read_text()) == {"winner": "other"}
    assert not any((out / "tmp").iterdir()) and not (out / "failed").exists()


def test_two_grids_in_one_folder_list_every_cell(tmp_path, fake_runner):
    """A product plus extra variants run into one folder: the manifest (and the
    report's "cells of N" count) covers both sweeps' cells."""
    path = write_sweep(tmp_path, grid={"model.num_layers": [1, 2], "model.residual": ["diffusion", "wave"], "train.seed": [0]})
    out = tmp_path / "both"
    assert _cli(path, f"out_dir={out}") == 0
    assert _cli(path, f"out_dir={out}", "grid.model.num_layers=[3]") == 0
    manifest = json.loads((out / "sweep.json").read_text())
    assert len(manifest["cells"]) == 6 and len(store_listing(out)) == 6
    from wavygraph.report import load_results, write_summary

    assert "6 cells of 6" in write_summary(load_results(out), tmp_path, out).read_text()
    # rerunning the first sweep lists nothing twice
    assert _cli(path, f"out_dir={out}") == 0
    assert len(json.loads((out / "sweep.json").read_text())["cells"]) == 6
