"""wavygraph.report on a hand-built sweep folder with known numbers."""
import json
import statistics
from pathlib import Path

import pandas as pd
import pytest

from wavygraph import report
from wavygraph.cli import main as cli_main

SCORES = {  # (depth, residual) -> test scores of seeds 0, 1, 2
    (2, "diffusion"): [0.70, 0.72, 0.74],
    (2, "wave"): [0.75, 0.71, 0.73],
    (8, "diffusion"): [0.30, 0.20, 0.25],
    (8, "wave"): [0.60, 0.66, 0.63],
    (8, "light_wave"): [0.50, 0.52, 0.51],
}


def make_folder(root: Path) -> Path:
    for (depth, residual), scores in SCORES.items():
        for seed, score in enumerate(scores):
            h = f"{depth:02d}{residual[:4]}{seed}".ljust(16, "0")
            cfg = {"data": {"name": "csbm"}, "model": {"num_layers": depth, "residual": residual},
                   "train": {"seed": seed}, "out_dir": str(root / "cells" / h)}
            diag = {"cosine_similarity": [seed + 0.1 * i for i in range(depth + 1)],
                    "spectral_gap": [0.5] * depth}
            rec = {"hash": h, "params": {"model.num_layers": depth, "model.residual": residual, "train.seed": seed},
                   "config": cfg, "metrics": {"metric": "acc", "test": score, "best_val": score, "best_epoch": 3,
                                              "epochs": 5, "seconds": 1.0, "num_params": 100, "diagnostics": diag}}
            (root / "cells" / h).mkdir(parents=True)
            (root / "cells" / h / "cell.json").write_text(json.dumps(rec))
    return root


def test_results_and_summary(tmp_path):
    out = make_folder(tmp_path / "sweep")
    paths = report.make_report(out, depth=8)
    df = pd.read_csv(paths["results"])
    assert len(df) == 15
    assert list(df["residual"].unique()) == ["diffusion", "wave", "light_wave"]  # the STEPPERS order
    row = df[(df.depth == 8) & (df.residual == "wave") & (df.seed == 1)].iloc[0]
    assert row["test"] == 0.66 and row["cosine_similarity_last"] == pytest.approx(1.8)
    text = Path(paths["summary"]).read_text()
    assert "15 cells" in text and "(%)" in text
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0] == "| layers | diffusion | wave | light_wave |"
    m, s = statistics.mean(SCORES[(8, "wave")]) * 100, statistics.stdev(SCORES[(8, "wave")]) * 100
    m2, s2 = statistics.mean(SCORES[(2, "wave")]) * 100, statistics.stdev(SCORES[(2, "wave")]) * 100
    m3 = statistics.mean(SCORES[(2, "diffusion")]) * 100
    assert lines[1] == f"| 2 | {m3:.2f} ± 2.00 (3) | **{m2:.2f} ± {s2:.2f}** (3) | — |"
    assert lines[2].startswith("| 8 | 25.00 ± 5.00 (3) | ") and f"**{m:.2f} ± {s:.2f}** (3)" in lines[2]
    assert lines[2].count("**") == 2  # one best per depth


def test_plots_and_depth_choice(tmp_path):
    out = make_folder(tmp_path / "sweep")
    paths = report.make_report(out)  # default: the largest depth
    assert paths["diagnostics"].name == "diagnostics_depth8.png"
    for key in ("score_plot", "diagnostics"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[key].stat().st_size > 5000
    frame = report.diagnostics_frame(report.load_cells(out), 2)
    gap = frame[frame.measure == "spectral_gap"]
    assert sorted(gap.layer.unique()) == [1, 2]  # the gap of layer l is plotted at l
    cos = frame[(frame.measure == "cosine_similarity") & (frame.residual == "wave")]
    assert cos.groupby("layer")["value"].mean().tolist() == pytest.approx([1.0, 1.1, 1.2])
    with pytest.raises(report.ReportError, match="depths 2, 8"):
        report.make_report(out, depth=32)


def test_cli(tmp_path, capsys):
    out = make_folder(tmp_path / "sweep")
    assert cli_main(["report", str(out), "--depth", "2", "--out", str(tmp_path / "r")]) == 0
    printed = capsys.readouterr().out
    assert "| layers |" in printed and str(tmp_path / "r" / "diagnostics_depth2.png") in printed
    assert (tmp_path / "r" / "results.csv").is_file()
    assert cli_main(["report", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.startswith("wavygraph: error: ")


def test_variants_and_best_worst(tmp_path):
    """With another grid key (force_scale), each (residual, value) pair is a
    variant: its own diagnostics line, and best/worst pick by mean score."""
    root = tmp_path / "sweep"
    scores = {("wave", "fixed"): [0.8, 0.7], ("wave", "rezero"): [0.5, 0.4], ("diffusion", "rezero"): [0.9, 0.9],
              ("diffusion", "fixed"): [0.2, 0.3]}
    for (residual, fs), values in scores.items():
        for seed, score in enumerate(values):
            h = f"{residual[:4]}{fs[:3]}{seed}".ljust(16, "0")
            cfg = {"data": {"name": "cora"}, "model": {"num_layers": 4, "residual": residual, "force_scale": fs},
                   "train": {"seed": seed}}
            diag = {"dirichlet_energy": [score + i for i in range(5)]}
            rec = {"hash": h, "params": {"model.num_layers": 4, "model.residual": residual,
                                         "model.force_scale": fs, "train.seed": seed},
                   "config": cfg, "metrics": {"metric": "acc", "test": score, "diagnostics": diag}}
            (root / "cells" / h).mkdir(parents=True)
            (root / "cells" / h / "cell.json").write_text(json.dumps(rec))
    df = report.load_results(root)
    assert report.best_and_worst(df, 4) == ["diffusion, force_scale=rezero", "diffusion, force_scale=fixed"]
    frame = report.diagnostics_frame(report.load_cells(root), 4)
    assert set(frame["variant"]) == {"wave, force_scale=fixed", "wave, force_scale=rezero",
                                     "diffusion, force_scale=rezero", "diffusion, force_scale=fixed"}
    first = frame[(frame.variant == "wave, force_scale=rezero") & (frame.layer == 0)]["value"]
    assert first.mean() == pytest.approx(0.45)
    table = report.variant_table(df).splitlines()
    assert table[0] == "| variant | 4 layers |"
    assert table[2:] == ["| diffusion, force_scale=fixed | 25.00 ± 7.07 (2) |",
                         "| diffusion, force_scale=rezero | **90.00 ± 0.00** (2) |",
                         "| wave, force_scale=fixed | 75.00 ± 7.07 (2) |",
                         "| wave, force_scale=rezero | 45.00 ± 7.07 (2) |"]
    paths = report.make_report(root, best_worst=True)
    assert "## Every variant against depth" in paths["summary"].read_text()
    assert paths["diagnostics_best_worst"].name == "diagnostics_depth4_best_worst.png"
    assert paths["diagnostics_best_worst"].read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(report.ReportError, match="no scored cells at depth 8"):
        report.best_and_worst(df, 8)


def test_grid_over_arch_gives_one_table_with_a_column_per_arch(tmp_path):
    """A baselines sweep (grid over model.arch, residual fixed) reads as one
    table whose columns are the archs, not one table per arch with empty cells."""
    root = tmp_path / "sweep"
    scores = {"mlp": [0.36, 0.38], "gcn": [0.65, 0.63]}
    for arch, values in scores.items():
        for seed, score in enumerate(values):
            h = f"{arch}{seed}".ljust(16, "0")
            cfg = {"data": {"name": "csbm"}, "model": {"num_layers": 3, "residual": "diffusion", "arch": arch},
                   "train": {"seed": seed}}
            rec = {"hash": h, "params": {"model.arch": arch, "model.residual": "diffusion", "train.seed": seed},
                   "config": cfg, "metrics": {"metric": "acc", "test": score, "best_val": score}}
            (root / "cells" / h).mkdir(parents=True)
            (root / "cells" / h / "cell.json").write_text(json.dumps(rec))
    text = report.summary_table(report.load_results(root))
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines == ["| layers | gcn | mlp |", "| 3 | **64.00 ± 1.41** (2) | 37.00 ± 1.41 (2) |"]
    assert "model.arch=" not in text


def test_data_splits_are_averaged_like_seeds(tmp_path):
    """A grid over data.split (Minesweeper's 10 given splits) is a repeat, not
    a variant: one row per depth and kind, mean and std over every (seed,
    split) run, and results.csv keeps the split of each cell."""
    root = tmp_path / "sweep"
    scores = {(0, 0): 0.90, (0, 1): 0.80, (0, 2): 0.85, (1, 0): 0.70}  # (seed, split) -> test
    for (seed, split), score in scores.items():
        h = f"s{seed}p{split}".ljust(16, "0")
        cfg = {"data": {"name": "minesweeper", "split": split},
               "model": {"num_layers": 2, "residual": "wave"}, "train": {"seed": seed}}
        rec = {"hash": h, "params": {"data.split": split, "train.seed": seed},
               "config": cfg, "metrics": {"metric": "rocauc", "test": score, "best_val": score}}
        (root / "cells" / h).mkdir(parents=True)
        (root / "cells" / h / "cell.json").write_text(json.dumps(rec))
    df = report.load_results(root)
    assert sorted(zip(df["seed"], df["split"])) == sorted(scores)
    assert report.other_keys(df) == []
    text = report.summary_table(df)
    values = list(scores.values())
    m, s = statistics.mean(values) * 100, statistics.stdev(values) * 100
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines == ["| layers | wave |", f"| 2 | **{m:.2f} ± {s:.2f}** (4) |"]
    assert "over seeds and data splits" in text and "data.split=" not in text
