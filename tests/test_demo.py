"""wavygraph demo end to end: real training on the built-in synthetic graph
(tiny settings), sweep store, report, printed paths; a rerun reuses the runs."""
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from wavygraph.cli import main as cli_main
from wavygraph.nn import STEPPERS


@pytest.fixture
def one_thread():
    # the test machine is shared: OpenMP threads competing for 2 cores make tiny runs 10x slower
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow  # a real sweep of training runs
def test_demo_runs_and_reports(tmp_path, capsys, one_thread):
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--depths", "1,3", "--seeds", "0", "--epochs", "2", "--no-progress"]
    runs = 2 * len(STEPPERS)  # two depths, one seed, every registered kind
    assert cli_main(args) == 0
    printed = capsys.readouterr().out
    assert f"{runs} runs ({runs} new, 0 reused)" in printed
    for name in ("summary.md", "results.csv", "score_vs_depth.png", "diagnostics_depth3.png"):
        assert str(out / name) in printed and (out / name).stat().st_size > 0
    df = pd.read_csv(out / "results.csv")
    assert len(df) == runs and set(df.residual) == set(STEPPERS)
    assert df["test"].between(0, 1).all() and (df["metric"] == df["metric"].iloc[0]).all()
    cell = json.loads(next((out / "cells").glob("*/cell.json")).read_text())
    depth = cell["config"]["model"]["num_layers"]
    assert cell["config"]["data"]["name"] == "csbm" and cell["config"]["train"]["epochs"] == 2
    assert len(cell["metrics"]["diagnostics"]["spectral_gap"]) == depth
    assert len(cell["metrics"]["diagnostics"]["inter_class_variance"]) == depth + 1
    assert (Path(cell["config"]["out_dir"]) / "model.pt").is_file()
    # the sweep file it wrote reruns with `wavygraph sweep`, everything reused
    assert cli_main(args) == 0
    assert f"{runs} runs (0 new, {runs} reused)" in capsys.readouterr().out
    assert cli_main(["sweep", str(out / "demo_sweep.yaml"), "--no-progress"]) == 0
    assert f"ran 0, already done {runs}" in capsys.readouterr().out
