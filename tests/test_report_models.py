"""Report tables never mix models: cells are averaged only when their
resolved configs differ in the seed (or data split) alone; any other key that
differs between the cells of a folder splits the rows and is named."""
import json
from pathlib import Path

import pandas as pd
import pytest

from wavygraph import cli, report
from wavygraph.report.results import model_keys


def _cell(root: Path, name: str, seed: int, test: float, model: dict | None = None, data: dict | None = None,
          fingerprint: dict | None = None) -> None:
    cfg = {"data": {"name": "csbm", **(data or {})},
           "model": {"num_layers": 2, "residual": "diffusion", "hidden_channels": 8, **(model or {})},
           "train": {"seed": seed, "device": "cpu"}, "out_dir": str(root / "cells" / name)}
    rec = {"hash": name, "params": {"model.num_layers": 2, "model.residual": cfg["model"]["residual"],
                                    "train.seed": seed},
           "config": cfg, "metrics": {"metric": "acc", "test": test, "best_val": test}}
    if fingerprint is not None:
        rec["data_fingerprint"] = fingerprint
    (root / "cells" / name).mkdir(parents=True)
    (root / "cells" / name / "cell.json").write_text(json.dumps(rec))


def _table_lines(text):
    return [line for line in text.splitlines() if line.startswith("| 2 |")]


def test_cells_that_differ_outside_the_grid_are_separate_rows(tmp_path):
    _cell(tmp_path, "a0", 0, 0.20, {"hidden_channels": 8})
    _cell(tmp_path, "b0", 0, 0.40, {"hidden_channels": 16})
    _cell(tmp_path, "b1", 1, 0.50, {"hidden_channels": 16}, data={"root": "elsewhere"})  # data.root: not the model
    assert model_keys(report.load_cells(tmp_path)) == ["model.hidden_channels"]
    df = report.load_results(tmp_path)
    assert sorted(df["model.hidden_channels"]) == [8, 16, 16]
    text = report.summary_table(df)
    assert "**model.hidden_channels=8**" in text and "**model.hidden_channels=16**" in text
    assert _table_lines(text) == ["| 2 | **20.00** (1) |", "| 2 | **45.00 ± 7.07** (2) |"]
    assert "(3)" not in text and "30.00" not in text


def test_seeds_of_one_model_average_and_keys_added_later_count_as_their_old_value(tmp_path):
    _cell(tmp_path, "s0", 0, 0.20)
    _cell(tmp_path, "s1", 1, 0.40, {"reversible": False, "source_weight": 1.0})  # the values from before they existed
    assert model_keys(report.load_cells(tmp_path)) == []
    assert _table_lines(report.summary_table(report.load_results(tmp_path))) == ["| 2 | **30.00 ± 14.14** (2) |"]


def test_baselines_that_differ_in_model_residual_and_changed_graph_files_are_apart(tmp_path):
    _cell(tmp_path, "g0", 0, 0.20, {"arch": "gcn", "residual": "diffusion"})
    _cell(tmp_path, "g1", 0, 0.40, {"arch": "gcn", "residual": "wave"})
    df = report.load_results(tmp_path)
    assert sorted(df["residual"]) == ["gcn (residual=diffusion)", "gcn (residual=wave)"]
    other = tmp_path / "files"
    _cell(other, "f0", 0, 0.20, fingerprint={"path": {"sha256": "a" * 64, "size": 1}})
    _cell(other, "f1", 1, 0.40, fingerprint={"path": {"sha256": "b" * 64, "size": 1}})
    df = report.load_results(other)
    assert list(df["data.path_sha256"]) == ["a" * 12, "b" * 12]
    assert "(2)" not in report.summary_table(df)


SWEEP = """
grid:
  model.num_layers: [2]
  model.residual: [diffusion]
  train.seed: [0]
set: {{data.name: csbm, data.csbm.preset: small, data.csbm.num_nodes: 200, train.epochs: 2, train.num_threads: 1,
       train.diagnostics: false, train.progress: false, model.hidden_channels: {hidden}}}
out_dir: {out}
"""


def test_two_sweeps_with_different_set_into_one_folder_are_separate_rows(tmp_path, capsys):
    out = tmp_path / "out"
    for hidden in (8, 16):
        (tmp_path / f"s{hidden}.yaml").write_text(SWEEP.format(hidden=hidden, out=out))
        assert cli.main(["sweep", str(tmp_path / f"s{hidden}.yaml")]) == 0
    assert cli.main(["report", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "model.hidden_channels=8" in summary and "model.hidden_channels=16" in summary
    rows = _table_lines(summary)
    assert len(rows) == 2 and all(row.endswith("(1) |") for row in rows), rows
    assert len(pd.read_csv(out / "results.csv")) == 2


def test_null_scores_from_strict_json_are_read_as_missing(tmp_path):
    _cell(tmp_path, "n0", 0, None)  # a run whose test score was not finite: null in cell.json
    _cell(tmp_path, "n1", 1, 0.40)
    df = report.load_results(tmp_path)
    assert df["test"].isna().sum() == 1
    assert _table_lines(report.summary_table(df)) == ["| 2 | **40.00** (1) |"]
    paths = report.make_report(tmp_path)
    assert Path(paths["summary"]).is_file() and Path(paths["score_plot"]).is_file()
