import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wavygraph import cli

REPO = Path(__file__).resolve().parents[1]
SMALL = ["data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=300", "model.num_layers=2",
         "model.hidden_channels=8", "train.epochs=3", "train.progress=false"]


def _error_line(capsys):
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("wavygraph: error: ")
    return lines[0]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["data.name=cora", "data.root={root}", "data.download=false"], "Cora"),  # missing data set
        (["data.name=ogbn-arxiv", "data.root={root}", "data.download=false"], "arxiv.zip"),  # missing OGB data set
        (["data.name=nosuchset"], "unknown data set"),
        (["model.no_such_key=3"], "model.no_such_key"),
        (["train.epochs=many"], "train.epochs"),
        (["model.residual=bogus"], "model.residual"),
    ],
)
def test_errors_are_one_line_exit_2_and_write_nothing(tmp_path, capsys, args, needle):
    out = tmp_path / "out"
    root = tmp_path / "data"
    argv = ["train"] + [a.format(root=root) for a in args] + [f"out_dir={out}", "train.progress=false"]
    assert cli.main(argv) == 2
    assert needle in _error_line(capsys)
    assert not out.exists() and not root.exists()


def test_python_m_wavygraph_missing_data_subprocess(tmp_path):
    out, root = tmp_path / "out", tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "wavygraph", "train", str(REPO / "configs" / "cora.yaml"),
         f"data.root={root}", f"out_dir={out}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert str(root / "Cora" / "raw") in proc.stderr and "ind.cora.x" in proc.stderr
    assert not out.exists() and not root.exists()


def test_train_writes_run_folder_and_is_repeatable(tmp_path, capsys):
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert cli.main(["train"] + SMALL + [f"out_dir={out}", "train.seed=3"]) == 0
        assert sorted(p for p in os.listdir(out)) == ["config.yaml", "metrics.json", "model.pt"]  # no temp files
        metrics = json.loads((out / "metrics.json").read_text())
        for key in ("metric", "best_val", "test", "best_epoch", "epochs", "seconds", "num_params"):
            assert key in metrics
        assert "residual: diffusion" in (out / "config.yaml").read_text()
        runs.append(metrics)
    strip = lambda m: {k: v for k, v in m.items() if k not in ("seconds", "seconds_per_epoch", "peak_memory_mb")}
    assert strip(runs[0]) == strip(runs[1])
    printed = capsys.readouterr().out
    assert '"test"' in printed


def test_config_file_then_overrides(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data:\n  name: csbm\n  csbm:\n    preset: small\n    num_nodes: 200\ntrain:\n  epochs: 50\n")
    out = tmp_path / "run"
    args = ["train", str(cfg), "train.epochs=2", "model.num_layers=1", "model.hidden_channels=4",
            "train.progress=false", "train.diagnostics=false", f"out_dir={out}"]
    assert cli.main(args) == 0
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 2


def test_a_missing_subcommand_module_is_an_error(monkeypatch):
    monkeypatch.setattr(cli, "SUBCOMMANDS", ["wavygraph.train.cli", "wavygraph.not_a_module"])
    with pytest.raises(ModuleNotFoundError, match="not_a_module"):
        cli.build_parser()


def test_broken_subcommand_module_is_not_hidden(monkeypatch, tmp_path):
    (tmp_path / "wg_broken_sub.py").write_text("import wg_module_that_does_not_exist\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "SUBCOMMANDS", ["wg_broken_sub"])
    with pytest.raises(ModuleNotFoundError):
        cli.build_parser()


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "train" in capsys.readouterr().err


def test_a_closed_stdout_pipe_is_no_traceback(monkeypatch, capsys):
    """`wavygraph sweep ... | head`: the reader goes, the next print raises BrokenPipeError."""
    import wavygraph.report.cli as report_cli

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(report_cli, "command", broken)
    monkeypatch.setattr(os, "dup2", lambda fd, fd2: None)  # pytest's captured stdout stays as it is
    assert cli.main(["report", "somewhere"]) == 141
    assert "Traceback" not in capsys.readouterr().err
