"""What a run calls its model: a baseline (model.arch=gcn|mlp|gcnii|sgformer)
is named by its arch in the progress bar and in metrics.json, never by the
residual kind it does not have."""
import json

import pytest

from wavygraph import cli

SMALL = ["data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=200", "model.num_layers=2",
         "model.hidden_channels=8", "train.epochs=2", "train.num_threads=1", "train.diagnostics=false"]


@pytest.mark.parametrize("arch, label, residual", [("gcn", "gcn", None), ("mlp", "mlp", None),
                                                   ("wavy", "wave", "wave")])
def test_progress_bar_and_metrics_name_the_arch_of_a_baseline(tmp_path, capsys, arch, label, residual):
    extra = ["model.residual=wave"] if arch == "wavy" else []
    out = tmp_path / "run"
    assert cli.main(["train", *SMALL, f"model.arch={arch}", *extra, "train.progress=true", f"out_dir={out}"]) == 0
    bar = capsys.readouterr().err
    assert f"csbm {label} L2" in bar and ("diffusion" not in bar)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["arch"] == arch and metrics["residual"] == residual
