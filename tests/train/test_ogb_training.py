"""Train on OGB-format stand-ins through the registry and check the reported
scores against OGB's Evaluator computed here, independently."""
import inspect

import pandas as pd
import pytest
import torch
from ogb.nodeproppred import Evaluator
from torch_geometric.utils import subgraph

from wavygraph.config import load_config
from wavygraph.nn import WavyDIFFormer
from wavygraph.train import run


def _split(folder, split):
    return {
        k: torch.tensor(pd.read_csv(folder / "split" / split / f"{k}.csv.gz", header=None).values).view(-1)
        for k in ("train", "valid", "test")
    }


def _logits(model, x, edge_index, chunk):
    n = x.shape[0]
    if not chunk:
        return model(x, edge_index)
    outs = []
    for nodes in torch.arange(n).split(chunk):
        ei, _ = subgraph(nodes, edge_index, relabel_nodes=True, num_nodes=n)
        outs.append(model(x[nodes], ei))
    return torch.cat(outs)


@pytest.mark.parametrize(
    "name, batch_size, eval_batch_size",
    [
        ("ogbn-arxiv", None, None),  # full batch, full-graph evaluation
        ("ogbn-arxiv", 50, None),  # mini-batches, evaluation in node chunks of 50
        ("ogbn-proteins", None, None),
        ("ogbn-proteins", 50, 0),  # mini-batches, one full-graph evaluation pass
    ],
)
def test_train_scores_match_ogb_evaluator(ogb_root, tmp_path, name, batch_size, eval_batch_size):
    out = tmp_path / "run"
    cfg = load_config(
        None,
        [
            f"data.name={name}",
            f"data.root={ogb_root}",
            f"out_dir={out}",
            "model.num_layers=2",
            "model.hidden_channels=16",
            "train.epochs=4",
            "train.lr=0.01",
            f"train.batch_size={'null' if batch_size is None else batch_size}",
            f"train.eval_batch_size={'null' if eval_batch_size is None else eval_batch_size}",
            "train.progress=false",
            "train.diagnostics=false",
        ],
    )
    metrics = run(cfg)
    assert metrics["metric"] == ("rocauc" if name == "ogbn-proteins" else "acc")
    assert (metrics["num_tasks"], metrics["evaluator"]) == (112 if name == "ogbn-proteins" else 1, name)
    assert 1 <= metrics["best_epoch"] <= 4 and metrics["epochs"] == 4

    # independent recomputation: OGB's loader output, the checkpoint, OGB's Evaluator
    from ogb.nodeproppred import PygNodePropPredDataset
    from torch_geometric.utils import scatter, to_undirected

    from torch_geometric.data import Data
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    with torch.serialization.safe_globals([Data, DataEdgeAttr, DataTensorAttr, GlobalStorage]):
        ds = PygNodePropPredDataset(name, root=str(ogb_root))
    g = ds[0]
    if name == "ogbn-proteins":
        x = scatter(g.edge_attr, g.edge_index[0], dim=0, dim_size=g.num_nodes, reduce="mean")
        edge_index = g.edge_index
    else:
        x, edge_index = g.x, to_undirected(g.edge_index)
    ckpt = torch.load(out / "model.pt")
    wavy_keys = inspect.signature(WavyDIFFormer.__init__).parameters
    model = WavyDIFFormer(x.shape[1], out_channels=ds.num_tasks if name == "ogbn-proteins" else 40,
                          **{k: v for k, v in ckpt["config"]["model"].items() if k in wavy_keys})
    model.load_state_dict(ckpt["state_dict"])
    model.eval()
    chunk = batch_size if eval_batch_size is None else eval_batch_size
    with torch.no_grad():
        logits = _logits(model, x.float(), edge_index, chunk)
    split = _split(ogb_root / ("ogbn_proteins" if name == "ogbn-proteins" else "ogbn_arxiv"),
                   "species" if name == "ogbn-proteins" else "time")
    evaluator = Evaluator(name)
    key = "rocauc" if name == "ogbn-proteins" else "acc"

    def score(idx):
        if key == "acc":
            return evaluator.eval({"y_true": g.y[idx], "y_pred": logits[idx].argmax(-1, keepdim=True)})[key]
        return evaluator.eval({"y_true": g.y[idx], "y_pred": logits[idx]})[key]

    assert metrics["test"] == pytest.approx(score(split["test"]), abs=1e-6)
    assert metrics["best_val"] == pytest.approx(score(split["valid"]), abs=1e-6)
