"""wavygraph demo end to end: real training on the built-in synthetic graph
(tiny settings), sweep store, report, printed paths; a rerun reuses the runs.
And the demo table in docs/results.md: the one the default demo prints."""
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from wavygraph.cli import main as cli_main
from wavygraph.nn import STEPPERS

DOC = Path(__file__).resolve().parents[1] / "docs" / "results.md"
TABLE_START, TABLE_END = "<!-- demo-table:start -->", "<!-- demo-table:end -->"


def _with_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def one_thread():
    # the test machine is shared: OpenMP threads competing for 2 cores make tiny runs 10x slower
    yield from _with_threads(1)


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


def table_rows(text: str) -> list[str]:
    """The markdown table rows (lines starting with ``|``) of ``text``."""
    return [line.strip() for line in text.splitlines() if line.strip().startswith("|")]


def doc_demo_table() -> list[str]:
    """The rows of the demo table in docs/results.md, between its markers."""
    text = DOC.read_text()
    assert text.count(TABLE_START) == 1 and text.count(TABLE_END) == 1, f"{DOC}: one {TABLE_START} ... {TABLE_END}"
    return table_rows(text.split(TABLE_START)[1].split(TABLE_END)[0])


def test_doc_demo_table_has_every_kind_and_depth():
    rows = doc_demo_table()
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header == ["layers", *STEPPERS], "docs/results.md's demo table: rerun `wavygraph demo` and paste summary.md"
    assert [row.split("|")[1].strip() for row in rows[2:]] == ["2", "8", "32"]


@pytest.fixture
def two_threads():
    # the doc's table was printed on a 2-core machine with torch's default threads (2); float sums depend on them
    yield from _with_threads(2)


@pytest.mark.slow  # the default demo: 30 training runs, several minutes on a CPU
def test_doc_demo_table_is_what_the_demo_prints(tmp_path, capsys, two_threads):
    out = tmp_path / "demo"
    assert cli_main(["demo", "--out", str(out), "--no-progress"]) == 0
    printed = table_rows((out / "summary.md").read_text())
    assert printed == table_rows(capsys.readouterr().out)
    assert doc_demo_table() == printed, "docs/results.md's demo table differs from what `wavygraph demo` printed"
