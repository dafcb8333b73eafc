import os
import shutil
from pathlib import Path

import pytest
import torch
from torch_geometric.utils import homophily, is_undirected

from wavygraph.data import (
    DATASETS,
    DatasetInfo,
    DatasetNotFoundError,
    UnknownDatasetError,
    WavygraphDataError,
    induced_subgraph,
    load_dataset,
    random_partition,
)


def shared_dir() -> Path | None:
    for cand in (Path(__file__).resolve().parents[2] / ".." / "shared", Path("/work/shared")):
        if (cand / "data" / "planetoid" / "Cora" / "raw").is_dir():
            return cand.resolve()
    return None


@pytest.fixture
def cora_root(tmp_path):
    shared = shared_dir()
    if shared is None:
        pytest.skip("shared Cora raw files not available")
    shutil.copytree(shared / "data" / "planetoid" / "Cora" / "raw", tmp_path / "Cora" / "raw")
    return tmp_path


def test_registry_names():
    for name in ("ogbn-arxiv", "ogbn-proteins", "ogbn-products", "cora", "citeseer", "pubmed", "actor", "csbm"):
        assert name in DATASETS


def test_unknown_name():
    with pytest.raises(UnknownDatasetError, match="choose one of") as err:
        load_dataset("not-a-dataset", "/nonexistent")
    assert isinstance(err.value, WavygraphDataError) and isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    "name, folder, needle",
    [
        ("cora", "Cora/raw", "ind.cora.x"),
        ("citeseer", "CiteSeer/raw", "ind.citeseer.graph"),
        ("actor", "Actor/raw", "out1_graph_edges.txt"),
        ("ogbn-arxiv", "ogbn_arxiv", "arxiv.zip"),
        ("ogbn-proteins", "ogbn_proteins", "proteins.zip"),
    ],
)
def test_missing_dataset_says_what_to_put_where(tmp_path, name, folder, needle):
    root = tmp_path / "root"
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset(name, str(root), download=False)
    msg = str(err.value)
    assert "\n" not in msg and needle in msg and str(root / folder) in msg and "data.download=false" in msg
    assert not root.exists()  # nothing created, nothing half-processed


def test_missing_files_in_existing_root_leave_no_new_folders(tmp_path):
    (tmp_path / "keep").mkdir()
    with pytest.raises(DatasetNotFoundError):
        load_dataset("pubmed", str(tmp_path), download=False)
    assert sorted(os.listdir(tmp_path)) == ["keep"]


def test_cora_public_split(cora_root):
    data, info = load_dataset("cora", str(cora_root))
    assert (info.task, info.metric, info.num_outputs, info.num_features) == ("multiclass", "acc", 7, 1433)
    assert data.num_nodes == 2708 and data.y.shape == (2708,) and data.y.dtype == torch.long
    assert [int(data[m].sum()) for m in ("train_mask", "val_mask", "test_mask")] == [140, 500, 1000]
    with pytest.raises(WavygraphDataError, match="one split"):
        load_dataset("cora", str(cora_root), split=3)
    normed, _ = load_dataset("cora", str(cora_root), normalize=True)
    assert torch.allclose(normed.x.sum(-1)[data.x.sum(-1) > 0], torch.ones(1))


def test_cora_folder_name_is_case_insensitive(tmp_path, cora_root):
    (cora_root / "Cora").rename(cora_root / "cora")
    data, _ = load_dataset("cora", str(cora_root))
    assert data.num_nodes == 2708


def test_csbm_statistics_and_determinism():
    opts = dict(preset="small", num_nodes=3000, num_classes=4, avg_degree=10.0, homophily=0.8)
    data, info = load_dataset("csbm", split=1, **opts)
    assert info.task == "multiclass" and info.num_outputs == 4 and data.x.shape == (3000, 32)
    assert is_undirected(data.edge_index)
    assert abs(data.num_edges / data.num_nodes - 10.0) < 0.5
    assert abs(homophily(data.edge_index, data.y) - 0.8) < 0.03
    assert torch.bincount(data.y).tolist() == [750] * 4
    again, _ = load_dataset("csbm", split=1, **opts)
    assert torch.equal(data.edge_index, again.edge_index) and torch.equal(data.x, again.x)
    other, _ = load_dataset("csbm", split=2, **opts)  # another split, same graph
    assert torch.equal(other.x, data.x) and not torch.equal(other.train_mask, data.train_mask)
    masks = data.train_mask.int() + data.val_mask.int() + data.test_mask.int()
    assert bool((masks == 1).all())
    with pytest.raises(WavygraphDataError, match="unknown csbm option"):
        load_dataset("csbm", preset="small", bogus=1)
    with pytest.raises(WavygraphDataError, match="preset"):
        load_dataset("csbm", preset="huge")


def test_random_partition_and_induced_subgraph_keep_chunk_order():
    n = 10
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]])
    data = load_dataset("csbm", preset="small", num_nodes=n, num_classes=2)[0]
    data.edge_index = edge_index
    parts = random_partition(n, 4, torch.Generator().manual_seed(0))
    assert [p.numel() for p in parts] == [4, 4, 2]
    assert sorted(torch.cat(parts).tolist()) == list(range(n))
    nodes = torch.tensor([3, 2, 7, 4])
    sub = induced_subgraph(data, nodes)
    # edges 2->3 and 3->4 survive; relabelled by position in `nodes`
    assert sorted(map(tuple, sub.edge_index.t().tolist())) == [(0, 3), (1, 0)]
    assert torch.equal(sub.x, data.x[nodes]) and torch.equal(sub.y, data.y[nodes])
    assert torch.equal(sub.train_mask, data.train_mask[nodes])


def test_score_definitions():
    y = torch.tensor([0, 1, 2, 1])
    logits = torch.eye(3)[torch.tensor([0, 1, 1, 1])]
    info = DatasetInfo("x", "multiclass", "acc", 3, 3)
    assert info.score(y, logits) == pytest.approx(0.75)
    ml = DatasetInfo("x", "multilabel", "rocauc", 3, 2)
    y2 = torch.tensor([[1, 0], [0, 0], [1, 1], [0, 1]])
    s2 = torch.tensor([[0.9, 0.1], [0.1, 0.2], [0.8, 0.3], [0.2, 0.9]])
    # task 0 perfectly ranked (1.0); task 1: positives 0.3, 0.9 vs negatives 0.1, 0.2 -> 1.0
    assert ml.score(y2, s2) == pytest.approx(1.0)
    s2[2, 1] = 0.15  # one of four pairs misordered in task 1
    assert ml.score(y2, s2) == pytest.approx((1.0 + 0.75) / 2)
