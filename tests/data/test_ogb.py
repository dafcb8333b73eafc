import gzip
import shutil

import pandas as pd
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import is_undirected

from wavygraph.data import DatasetNotFoundError, WavygraphDataError, load_dataset, ogb_safe_load


def _csv(path):
    return torch.tensor(pd.read_csv(path, header=None).values)


def _split(folder, split):
    return {k: _csv(folder / "split" / split / f"{k}.csv.gz").view(-1) for k in ("train", "valid", "test")}


def test_arxiv_through_ogb_loader(ogb_root):
    data, info = load_dataset("ogbn-arxiv", str(ogb_root))
    folder = ogb_root / "ogbn_arxiv"
    assert (folder / "processed" / "geometric_data_processed.pt").exists()  # OGB processed it
    assert (info.task, info.metric, info.ogb_name, info.num_outputs) == ("multiclass", "acc", "ogbn-arxiv", 40)
    assert torch.equal(data.y, _csv(folder / "raw" / "node-label.csv.gz").view(-1))
    assert torch.allclose(data.x, _csv(folder / "raw" / "node-feat.csv.gz").float())
    assert is_undirected(data.edge_index)
    raw_edges = _csv(folder / "raw" / "edge.csv.gz").t()
    assert data.num_edges >= raw_edges.shape[1] and data.num_edges <= 2 * raw_edges.shape[1]
    split = _split(folder, "time")
    for key, mask in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        assert torch.equal(data[mask].nonzero().view(-1), split[key].sort().values)
    again, _ = load_dataset("ogbn-arxiv", str(ogb_root))  # from the processed file
    assert torch.equal(again.edge_index, data.edge_index)


def test_proteins_features_are_mean_of_incident_edge_features(ogb_root):
    data, info = load_dataset("ogbn-proteins", str(ogb_root))
    assert (info.task, info.metric, info.num_outputs) == ("multilabel", "rocauc", 112)
    folder = ogb_root / "ogbn_proteins"
    edges = _csv(folder / "raw" / "edge.csv.gz")
    attr = _csv(folder / "raw" / "edge-feat.csv.gz").float()
    total = torch.zeros(data.num_nodes, attr.shape[1])
    count = torch.zeros(data.num_nodes)
    for (u, v), a in zip(edges.tolist(), attr):
        for node in (u, v):
            total[node] += a
            count[node] += 1
    expected = total / count.clamp_min(1).unsqueeze(1)
    assert torch.allclose(data.x, expected, atol=1e-6)
    assert data.y.shape == (data.num_nodes, 112)
    assert torch.equal(data.y.long(), _csv(folder / "raw" / "node-label.csv.gz"))


def test_safe_globals_only_inside_the_loader(ogb_root):
    before = list(torch.serialization.get_safe_globals())
    with ogb_safe_load():
        assert Data in torch.serialization.get_safe_globals()
    load_dataset("ogbn-arxiv", str(ogb_root))
    assert list(torch.serialization.get_safe_globals()) == before
    # torch's default stays weights_only: an arbitrary class is still refused
    path = ogb_root / "obj.pt"
    torch.save({"x": _Unlisted()}, path)
    with pytest.raises(Exception, match="[Ww]eights"):
        torch.load(path)


class _Unlisted:
    pass


def test_missing_release_file_is_an_error_not_a_prompt(ogb_root):
    (ogb_root / "ogbn_arxiv" / "RELEASE_v1.txt").unlink()
    with pytest.raises(DatasetNotFoundError, match="RELEASE_v1.txt.*data.download=false"):
        load_dataset("ogbn-arxiv", str(ogb_root), download=False)


def test_missing_split_and_raw_files_are_named(ogb_root):
    (ogb_root / "ogbn_proteins" / "split" / "species" / "valid.csv.gz").unlink()
    (ogb_root / "ogbn_proteins" / "raw" / "edge-feat.csv.gz").unlink()
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("ogbn-proteins", str(ogb_root), download=False)
    msg = str(err.value)
    assert "valid.csv.gz" in msg and "edge-feat.csv.gz" in msg and "proteins.zip" in msg and "\n" not in msg
    assert not (ogb_root / "ogbn_proteins" / "processed").exists()


def test_failed_processing_leaves_no_processed_folder(ogb_root):
    with gzip.open(ogb_root / "ogbn_arxiv" / "raw" / "node-label.csv.gz", "wt") as f:
        f.write("not,a,label\n")
    with pytest.raises(WavygraphDataError, match="ogbn-arxiv"):
        load_dataset("ogbn-arxiv", str(ogb_root))
    assert not (ogb_root / "ogbn_arxiv" / "processed").exists()


def test_pyg_suffixed_folder_is_found(ogb_root):
    shutil.move(str(ogb_root / "ogbn_arxiv"), str(ogb_root / "ogbn_arxiv_pyg"))
    data, _ = load_dataset("ogbn-arxiv", str(ogb_root))
    assert data.num_nodes == 120
