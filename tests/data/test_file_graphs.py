"""Graphs of one's own: data.name=file (a saved PyG Data, an edge list,
GraphML, GML), wavygraph.data.from_networkx, the stratified split, the
one-line errors of bad files, and train / sweep / report over a GraphML file."""
import json
import os

import networkx as nx
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from wavygraph import cli
from wavygraph.config import ConfigError, load_config
from wavygraph.data import (DATASETS, InvalidDataError, from_networkx, load_dataset, node_order,
                            stratified_split)

TINY = ["model.num_layers=2", "model.hidden_channels=8", "train.epochs=2", "train.num_threads=1",
        "train.progress=false", "train.diagnostics=false"]


def _masks(data):
    return [data.train_mask, data.val_mask, data.test_mask]


def _blocks(n_per=(10, 10, 10), features=3, seed=0):
    """A three-block graph (nodes 0..N-1, attribute block) and features whose
    float32 values print exactly."""
    sizes = list(n_per)
    p = [[0.5 if i == j else 0.05 for j in range(len(sizes))] for i in range(len(sizes))]
    G = nx.stochastic_block_model(sizes, p, seed=seed)
    G.graph.clear()  # the partition (a list of sets) is no GraphML value
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(G.number_of_nodes(), features)).astype(np.float32)
    for v in G:
        G.nodes[v]["y"] = int(G.nodes[v].pop("block"))
        G.nodes[v]["x"] = " ".join(repr(float(a)) for a in x[v])
    return G, torch.from_numpy(x)


def _undirected(pairs, n):
    """Both directions of every pair, no self loops, sorted by (source, target)."""
    edges = {(u, v) for u, v in pairs if u != v} | {(v, u) for u, v in pairs if u != v}
    return torch.tensor(sorted(edges), dtype=torch.long).t().reshape(2, -1)


# --------------------------------------------------------------------------
# one test per format


def test_pt_file_keeps_given_masks_and_makes_edges_undirected(tmp_path):
    x = torch.arange(12.0).view(6, 2)
    edge_index = torch.tensor([[0, 1, 2, 3, 3, 5], [1, 2, 2, 4, 4, 0]])  # directed, a self loop, a duplicate
    masks = [torch.tensor([1, 1, 0, 0, 0, 0]), torch.tensor([0, 0, 1, 1, 0, 0]), torch.tensor([0, 0, 0, 0, 1, 1])]
    torch.save(Data(x=x, edge_index=edge_index, y=torch.tensor([0, 1, 0, 1, 0, 1]),
                    **{k: m.bool() for k, m in zip(("train_mask", "val_mask", "test_mask"), masks)}), tmp_path / "g.pt")
    data, info = load_dataset("file", path=str(tmp_path / "g.pt"))
    assert torch.equal(data.x, x) and torch.equal(data.y, torch.tensor([0, 1, 0, 1, 0, 1]))
    assert torch.equal(data.edge_index, _undirected([(0, 1), (1, 2), (3, 4), (5, 0)], 6))
    assert all(torch.equal(a, b.bool()) for a, b in zip(_masks(data), masks))
    assert (info.name, info.task, info.num_features, info.num_outputs, info.num_splits) == ("g.pt", "multiclass", 2, 2, 1)


def test_pt_file_with_several_splits_takes_column_data_split(tmp_path):
    n = 6
    cols = torch.eye(3, dtype=torch.bool).repeat_interleave(2, 0)  # (6, 3): node pairs per split
    torch.save(Data(x=torch.ones(n, 1), edge_index=torch.tensor([[0], [1]]), y=torch.zeros(n, dtype=torch.long),
                    train_mask=cols, val_mask=cols.roll(1, 1), test_mask=cols.roll(2, 1)), tmp_path / "g.pt")
    data, info = load_dataset("file", path=str(tmp_path / "g.pt"), split=2)
    assert torch.equal(data.train_mask, cols[:, 2]) and info.num_splits == 3
    with pytest.raises(InvalidDataError, match="3 split"):
        load_dataset("file", path=str(tmp_path / "g.pt"), split=3)


def test_edge_list_with_feature_and_label_files_numbers_nodes_by_value(tmp_path):
    # ids are text; "2" < "10" by value; the third column (a weight) is ignored
    (tmp_path / "g.edgelist").write_text("# u v w\n10 2 0.5\n2 1 1.0\n1 1 1.0\n")
    np.save(tmp_path / "x.npy", np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]], dtype=np.float32))  # nodes 1, 2, 10
    (tmp_path / "y.csv").write_text("1\n1\n1\n")
    data, _ = load_dataset("file", path=str(tmp_path / "g.edgelist"), features=str(tmp_path / "x.npy"),
                           labels=str(tmp_path / "y.csv"), train_fraction=1 / 3, val_fraction=1 / 3)
    assert node_order(["10", "2", "1"]) == ["1", "2", "10"]
    assert torch.equal(data.x[:, 0], torch.tensor([1.0, 2.0, 3.0])) and torch.equal(data.y, torch.tensor([1, 1, 1]))
    assert torch.equal(data.edge_index, _undirected([(0, 1), (1, 2)], 3))  # the self loop 1-1 dropped
    assert int(sum(m.long() for m in _masks(data)).max()) == 1 and all(int(m.sum()) == 1 for m in _masks(data))


def test_graphml_keeps_isolated_nodes_reads_mask_attributes_and_orders_text_ids(tmp_path):
    G = nx.Graph()
    for i, name in enumerate(["b", "a", "c", "lonely"]):  # not all integers: ordered as text
        G.add_node(name, x=f"{i} {i + 0.5}", y=i % 2, train_mask=name in ("a", "b"), val_mask=name == "c",
                   test_mask=name == "lonely")
    G.add_edges_from([("a", "b"), ("b", "c")])
    nx.write_graphml(G, tmp_path / "g.graphml")
    data, info = load_dataset("file", path=str(tmp_path / "g.graphml"))
    order = node_order(G.nodes)  # a, b, c, lonely
    assert order == ["a", "b", "c", "lonely"] and data.num_nodes == 4
    assert torch.equal(data.x, torch.tensor([[1, 1.5], [0, 0.5], [2, 2.5], [3, 3.5]]))
    assert torch.equal(data.edge_index, _undirected([(0, 1), (1, 2)], 4))
    assert data.train_mask.tolist() == [True, True, False, False] and data.test_mask.tolist() == [False] * 3 + [True]
    assert info.num_splits == 1


def test_gml_file(tmp_path):
    G, x = _blocks((8, 8, 8))
    nx.write_gml(G, tmp_path / "g.gml")
    data, info = load_dataset("file", path=str(tmp_path / "g.gml"), split=1)
    assert torch.equal(data.x, x) and torch.equal(data.y, torch.tensor([0] * 8 + [1] * 8 + [2] * 8))
    assert torch.equal(data.edge_index, _undirected(list(G.edges()), 24))
    assert info.num_outputs == 3 and info.num_splits == 0


def test_graphml_written_by_networkx_round_trips_exactly(tmp_path):
    G, x = _blocks()
    G.add_node(30, x="0.0 0.0 0.0", y=2)  # isolated
    nx.write_graphml(G, tmp_path / "g.graphml")
    data, _ = load_dataset("file", path=str(tmp_path / "g.graphml"), split=4)
    direct = from_networkx(G, split=4)
    expected_y = torch.tensor([G.nodes[v]["y"] for v in range(31)])
    for d in (data, direct):
        assert torch.equal(d.x, torch.cat([x, torch.zeros(1, 3)])) and d.x.dtype == torch.float32
        assert torch.equal(d.y, expected_y)
        assert torch.equal(d.edge_index, _undirected(list(G.edges()), 31))
    assert all(torch.equal(a, b) for a, b in zip(_masks(data), _masks(direct)))


def test_from_networkx_takes_arrays_and_refuses_bad_attributes():
    G = nx.path_graph(6)
    data = from_networkx(G, features=np.eye(6), labels=[0, 1, 0, 1, 0, 1], train_fraction=1 / 3, val_fraction=1 / 3)
    assert data.x.shape == (6, 6) and data.edge_index.shape == (2, 10)
    nx.set_node_attributes(G, {v: "high" for v in G}, "x")
    with pytest.raises(InvalidDataError, match="non-numeric attribute x='high'"):
        from_networkx(G, labels=[0] * 6)


# --------------------------------------------------------------------------
# the stratified split


def test_stratified_split_sizes_balance_and_determinism():
    y = torch.tensor([0] * 50 + [1] * 30 + [2] * 20)
    state = torch.get_rng_state()
    train, val, test = stratified_split(y, seed=7)
    assert torch.equal(torch.get_rng_state(), state)  # torch's random state untouched
    assert [int(m.sum()) for m in (train, val, test)] == [60, 20, 20]
    assert bool((train.long() + val.long() + test.long() == 1).all())
    for mask, share in ((train, 0.6), (val, 0.2), (test, 0.2)):
        assert torch.bincount(y[mask], minlength=3).tolist() == [round(share * c) for c in (50, 30, 20)]
    assert all(torch.equal(a, b) for a, b in zip((train, val, test), stratified_split(y, seed=7)))
    assert not torch.equal(train, stratified_split(y, seed=8)[0])
    train, val, test = stratified_split(y, seed=0, train_fraction=0.5, val_fraction=0.3)
    assert [int(m.sum()) for m in (train, val, test)] == [50, 30, 20]


def test_stratified_split_refuses_a_class_too_small():
    with pytest.raises(InvalidDataError, match="class 1 has 2 node"):
        stratified_split(torch.tensor([0] * 20 + [1] * 2), seed=0)


# --------------------------------------------------------------------------
# errors: one line, exit 2, nothing written


def _write_graphml(path, n=9, x=True, y=True, bad_x=False, classes=3):
    G = nx.cycle_graph(n)
    for v in G:
        if x:
            G.nodes[v]["x"] = "high" if bad_x and v == 4 else f"{v} 1"
        if y:
            G.nodes[v]["y"] = v % classes
    nx.write_graphml(G, path)


BAD = {
    "missing file": (lambda d: None, ["data.path={d}/nope.graphml"], "no such file"),
    "unknown extension": (lambda d: (d / "g.json").write_text("{}"), ["data.path={d}/g.json"], "unknown extension"),
    "missing labels": (lambda d: _write_graphml(d / "g.graphml", y=False), ["data.path={d}/g.graphml"], "no node labels"),
    "x rows != nodes": (lambda d: np.save(d / "x.npy", np.ones((8, 2))),
                        ["data.path={d}/g.graphml", "data.features={d}/x.npy"], "shape (8, 2) but the graph has 9"),
    "y length != nodes": (lambda d: (d / "y.csv").write_text("0\n1\n"),
                          ["data.path={d}/g.graphml", "data.labels={d}/y.csv"], "shape (2,) but the graph has 9"),
    "non-numeric x": (lambda d: _write_graphml(d / "g.graphml", bad_x=True), ["data.path={d}/g.graphml"], "non-numeric"),
    "non-numeric labels file": (lambda d: (d / "y.csv").write_text("cat\ndog\n"),
                                ["data.path={d}/g.graphml", "data.labels={d}/y.csv"], "not a file of numbers"),
    "class too small": (lambda d: _write_graphml(d / "g.graphml", classes=5), ["data.path={d}/g.graphml"],
                        "too few to split stratified"),
    "not a Data": (lambda d: torch.save({"x": 1}, d / "g.pt"), ["data.path={d}/g.pt"], "not a torch_geometric"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_files_fail_in_one_line_with_exit_2_and_write_nothing(tmp_path, capsys, case):
    write, args, needle = BAD[case]
    files = tmp_path / "files"
    files.mkdir()
    _write_graphml(files / "g.graphml")
    write(files)
    out = tmp_path / "out"
    argv = ["train", "data.name=file", *[a.format(d=files) for a in args], f"out_dir={out}", *TINY]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("wavygraph: error: ") and "Traceback" not in err
    assert needle in err, err
    assert not out.exists()


def test_file_keys_are_checked_with_the_config():
    with pytest.raises(ConfigError, match="applies only to data.name=file"):
        load_config(None, ["data.path=g.graphml"])
    with pytest.raises(ConfigError, match="must be below 1"):
        load_config(None, ["data.train_fraction=0.8", "data.val_fraction=0.2"])
    assert "file" in DATASETS


# --------------------------------------------------------------------------
# train, sweep and report over a GraphML file


def test_train_sweep_and_report_over_a_graphml_file(tmp_path, capsys):
    G, _ = _blocks((12, 12, 12), features=4)
    path = tmp_path / "g.graphml"
    nx.write_graphml(G, path)
    out = tmp_path / "run"
    assert cli.main(["train", "data.name=file", f"data.path={path}", f"out_dir={out}", *TINY]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["dataset"] == "g.graphml" and metrics["epochs"] == 2
    base = tmp_path / "base.yaml"
    base.write_text(f"data:\n  name: file\n  path: {path}\n")
    spec = tmp_path / "sweep.yaml"
    spec.write_text("base: base.yaml\ngrid:\n  model.num_layers: [1, 2]\n  model.residual: [diffusion, wave]\n"
                    f"set: {{{', '.join(t.replace('=', ': ') for t in TINY if 'num_layers' not in t)}}}\n"
                    f"out_dir: {tmp_path / 'sweep'}\n")
    assert cli.main(["sweep", str(spec), "--no-progress"]) == 0
    assert len(os.listdir(tmp_path / "sweep" / "cells")) == 4
    capsys.readouterr()
    assert cli.main(["report", str(tmp_path / "sweep")]) == 0
    summary = (tmp_path / "sweep" / "summary.md").read_text()
    assert "| layers | diffusion | wave |" in summary
