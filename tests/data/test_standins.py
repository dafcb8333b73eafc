"""The csbm stand-ins of ogbn-arxiv and ogbn-proteins (shapes, splits, features, scoring)."""
import json

import pytest
import torch
from sklearn.metrics import roc_auc_score
from torch_geometric.utils import homophily, is_undirected

from wavygraph.cli import main
from wavygraph.data import load_dataset
from wavygraph.data.csbm import CSBM_PRESETS, PRESET_OGB, make_multilabel_csbm
from wavygraph.data.splits import random_split

PROTEINS_SMALL = dict(preset="proteins", num_nodes=400, avg_degree=30.0)


@pytest.mark.slow
def test_arxiv_preset_has_ogbn_arxiv_shape():
    data, info = load_dataset("csbm", preset="arxiv")
    assert data.num_nodes == 169_343 and data.x.shape[1] == 128 and info.num_outputs == 40
    assert abs(data.num_edges / 2 - 1_166_243) / 1_166_243 < 0.01  # ogbn-arxiv's undirected edges
    sizes = [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)]
    assert sizes == [90_941, 29_799, 48_603]
    assert (info.ogb_name, info.metric) == ("ogbn-arxiv", "acc")
    assert abs(homophily(data.edge_index, data.y) - CSBM_PRESETS["arxiv"]["homophily"]) < 0.01


def test_proteins_split_sizes_at_full_size_and_scaled():
    sizes, name = PRESET_OGB["proteins"]
    assert name == "ogbn-proteins"
    y = torch.zeros(sum(sizes))
    masks = random_split(y, 0, sizes[0] / sum(sizes), sizes[1] / sum(sizes))
    assert [int(m.sum()) for m in masks] == [86_619, 21_236, 24_679]
    data, _ = load_dataset("csbm", split=3, **PROTEINS_SMALL)
    got = [int(m.sum()) for m in (data.train_mask, data.val_mask, data.test_mask)]
    assert got == [round(400 * 86_619 / 132_534), round(400 * 21_236 / 132_534), 400 - sum(got[:2])]
    assert bool(((data.train_mask.int() + data.val_mask.int() + data.test_mask.int()) == 1).all())


def test_proteins_features_are_mean_of_incident_edge_features():
    opts = {k: v for k, v in CSBM_PRESETS["proteins"].items()}
    opts.update(num_nodes=120, avg_degree=12.0)
    data = make_multilabel_csbm(**opts, seed=5, keep_edge_attr=True)
    plain = make_multilabel_csbm(**opts, seed=5)
    assert torch.equal(plain.x, data.x) and torch.equal(plain.edge_index, data.edge_index)
    assert is_undirected(data.edge_index, data.edge_attr)
    expected = torch.zeros(120, 8, dtype=torch.float64)
    count = torch.zeros(120)
    for (u, _), a in zip(data.edge_index.t().tolist(), data.edge_attr.double()):
        expected[u] += a
        count[u] += 1
    assert torch.allclose(data.x.double(), expected / count.clamp_min(1).unsqueeze(1), atol=1e-5)
    # an edge's features: snr * mean of the two communities' embeddings + N(0, 1) noise
    same = data.community[data.edge_index[0]] == data.community[data.edge_index[1]]
    assert 0.3 < same.float().mean() < 0.7  # homophily 0.5 over communities
    assert data.y.shape == (120, 112) and set(data.y.unique().tolist()) <= {0.0, 1.0}


def test_proteins_degree_is_kept_when_scaled():
    for n in (1500, 3000):
        data, info = load_dataset("csbm", preset="proteins", num_nodes=n, avg_degree=100.0)
        assert abs(data.num_edges / n - 100.0) < 1.5  # duplicates replaced by further draws
        assert data.x.shape == (n, 8) and data.y.shape == (n, 112)
    assert (info.task, info.metric, info.ogb_name, info.num_outputs) == ("multilabel", "rocauc", "ogbn-proteins", 112)
    again, _ = load_dataset("csbm", preset="proteins", num_nodes=3000, avg_degree=100.0)
    assert torch.equal(again.edge_index, data.edge_index) and torch.equal(again.y, data.y)
    rates = data.y.mean(0)
    assert 0.0 < float(rates.min()) and float(rates.max()) < 1.0


def test_proteins_scored_by_ogb_evaluator_as_mean_task_rocauc():
    data, info = load_dataset("csbm", **PROTEINS_SMALL)
    scores = torch.randn(400, 112, generator=torch.Generator().manual_seed(0)) + data.y
    y = data.y.numpy()
    plain = sum(roc_auc_score(y[:, t], scores[:, t].numpy()) for t in range(112)) / 112
    assert info.score(data.y, scores) == pytest.approx(plain, abs=1e-9)


def test_proteins_standin_config_trains_and_reports_rocauc(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "configs/proteins_standin.yaml", "data.csbm.num_nodes=300", "data.csbm.avg_degree=20",
               "model.num_layers=2", "model.hidden_channels=8", "train.epochs=2", "train.batch_size=100",
               "train.eval_batch_size=100", "train.eval_every=1", "train.progress=false", f"out_dir={out}"])
    assert rc == 0
    metrics = json.loads(next(out.rglob("metrics.json")).read_text())
    assert (metrics["metric"], metrics["num_tasks"], metrics["evaluator"]) == ("rocauc", 112, "ogbn-proteins")
    assert 0.0 <= metrics["test"] <= 1.0 and 0.0 <= metrics["best_val"] <= 1.0
    printed = json.loads(capsys.readouterr().out.splitlines()[-2])  # the summary line before "wrote ..."
    assert (printed["metric"], printed["num_tasks"], printed["evaluator"]) == ("rocauc", 112, "ogbn-proteins")


@pytest.mark.parametrize("name, layers, base", [("arxiv", 7, "arxiv_standin"), ("proteins", 5, "proteins_standin")])
def test_paper_row_sweeps_on_the_standins(name, layers, base):
    """The sweeps of the paper's rows on the stand-ins: diffusion and the paper's
    Light Wave, 5 seeds, the paper's depth among 2..32, every cell the stand-in
    config with only depth, kind, seed and the diagnostics changed."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from wavygraph.config import load_config
    from wavygraph.sweep.spec import expand, load_sweep

    repo = Path(__file__).resolve().parents[2] / "configs"
    cells = expand(load_sweep(str(repo / "sweeps" / f"{name}_standin_paper.yaml")))
    assert len(cells) == 5 * 2 * 5
    assert {c.params["model.residual"] for c in cells} == {"diffusion", "light_wave"}
    depths = {c.params["model.num_layers"] for c in cells}
    assert layers in depths and min(depths) == 2 and max(depths) == 32
    assert {c.params["train.seed"] for c in cells} == set(range(5))
    plain = OmegaConf.to_container(load_config(str(repo / f"{base}.yaml")))
    for cell in cells[:3]:
        tree = cell.config
        for section in ("data", "model"):
            diff = {k for k in set(tree[section]) | set(plain[section]) if tree[section].get(k) != plain[section].get(k)}
            assert diff <= {"num_layers", "residual"}, (section, diff)
