"""Bad or unusual inputs through the command line, as a new user makes them:
each ends with exactly one line ``wavygraph: error: ...`` on stderr, exit code
2, no traceback, and the working directory (which holds ``out_dir``) exactly
as it was: nothing created, nothing changed. Most cases run in-process
(``wavygraph.cli.main``); two run as real processes. Also the rules behind
them: the split and label checks of ``check_data``, the device check, and a
training loss that becomes non-finite."""
import hashlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from wavygraph import cli
from wavygraph.data import InvalidDataError, check_data
from wavygraph.data.info import DatasetInfo
from wavygraph.data.validate import MAX_SPARSE_CLASSES

REPO = Path(__file__).resolve().parents[1]
N = 24
TRAIN = ["train.epochs=1", "train.num_threads=1", "train.progress=false", "train.diagnostics=false",
         "model.hidden_channels=8", "out_dir=out"]
CSBM = ["data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=200", *TRAIN]
FILE = ["data.name=file", *TRAIN]


def _mask(lo: int, hi: int) -> torch.Tensor:
    m = torch.zeros(N, dtype=torch.bool)
    m[lo:hi] = True
    return m


def _graph(**over) -> Data:
    g = torch.Generator().manual_seed(0)
    parts = dict(x=torch.randn(N, 4, generator=g), edge_index=torch.randint(0, N, (2, 40), generator=g),
                 y=torch.arange(N) % 3, train_mask=_mask(0, 12), val_mask=_mask(12, 18), test_mask=_mask(18, N))
    parts.update(over)
    return Data(**{k: v for k, v in parts.items() if v is not None})


def _label(value: int) -> torch.Tensor:
    y = torch.arange(N) % 3
    y[0] = value
    return y


def _nan_x() -> torch.Tensor:
    x = torch.randn(N, 4)
    x[3, 1] = float("nan")
    return x


#: files written into the working directory before a case runs: name -> Data (saved with torch.save) or text
GRAPHS = {
    "good.pt": _graph(),
    "empty_train.pt": _graph(train_mask=_mask(0, 0)),
    "empty_val.pt": _graph(val_mask=_mask(0, 0)),
    "empty_test.pt": _graph(test_mask=_mask(0, 0)),
    "same_masks.pt": _graph(val_mask=_mask(0, 12), test_mask=_mask(0, 12)),
    "label_1e6.pt": _graph(y=_label(10**6)),
    "label_1e9.pt": _graph(y=_label(10**9)),
    "frac_edges.pt": _graph(edge_index=torch.rand(2, 40) * N),
    "sparse_x.pt": _graph(x=torch.randn(N, 4).to_sparse()),
    "nan_x.pt": _graph(x=_nan_x()),
    "inf_x.pt": _graph(x=torch.full((N, 4), float("inf"))),
    "no_nodes.pt": Data(x=torch.zeros(0, 4), edge_index=torch.zeros(2, 0, dtype=torch.long),
                        y=torch.zeros(0, dtype=torch.long)),
    "edges_e2.pt": _graph(edge_index=torch.randint(0, N, (40, 2))),
    "edges_out.pt": _graph(edge_index=torch.tensor([[0, 1], [2, N + 5]])),
    "y_short.pt": _graph(y=torch.arange(5)),
    "y_fraction.pt": _graph(y=torch.arange(N) % 3 + 0.5),
    "masks_short.pt": _graph(train_mask=_mask(0, 12)[:5]),
    "mask_half.pt": _graph(val_mask=_mask(12, 18).float() * 0.5),
    "mask_01.pt": _graph(train_mask=_mask(0, 12).long(), val_mask=_mask(12, 18).float()),
    "x_3d.pt": _graph(x=torch.randn(N, 2, 2)),
    "two_splits.pt": _graph(train_mask=torch.stack([_mask(0, 12)] * 2, 1), val_mask=torch.stack([_mask(12, 18)] * 2, 1),
                            test_mask=torch.stack([_mask(18, N)] * 2, 1)),
    "not_data.pt": {"x": torch.randn(N, 4)},
    "garbage.pt": "not a torch file",
    "nan.graphml": "".join(
        ['<?xml version="1.0"?><graphml xmlns="http://graphml.graphdrawing.org/xmlns">'
         '<key id="x" for="node" attr.name="x" attr.type="string"/>'
         '<key id="y" for="node" attr.name="y" attr.type="int"/><graph edgedefault="undirected">']
        + [f'<node id="{i}"><data key="x">{"nan" if i == 0 else "0.5"} 1</data><data key="y">{i % 2}</data></node>'
           for i in range(30)]
        + [f'<edge source="{i}" target="{(i + 1) % 30}"/>' for i in range(30)] + ["</graph></graphml>"]),
    "features_rows.csv": "1,2\n3,4\n",
    "not_yaml.yaml": "model: [1, 2\n",
    "list.yaml": "- 1\n- 2\n",
    "sweep_nan.yaml": "grid:\n  model.num_layers: [1, 2]\nset: {data.name: file, data.path: nan.graphml, "
                      "train.epochs: 1}\nout_dir: sw\n",
    "sweep_sparse.yaml": "grid:\n  train.seed: [0, 1]\nset: {data.name: file, data.path: sparse_x.pt}\nout_dir: sw\n",
    "sweep_bad_key.yaml": "grid:\n  model.num_layers: [1]\nset: {model.bogus: 3}\nout_dir: sw\n",
    "sweep_bad_value.yaml": "grid:\n  model.num_layers: [1, -2]\nout_dir: sw\n",
    "sweep_unknown.yaml": "grid:\n  model.num_layers: [1]\nbogus: 1\nout_dir: sw\n",
    "sweep_empty_list.yaml": "grid:\n  model.num_layers: []\nout_dir: sw\n",
    "sweep_ok.yaml": "grid:\n  model.num_layers: [1]\nset: {data.name: csbm, data.csbm.preset: small, "
                     "data.csbm.num_nodes: 200, train.epochs: 1}\nout_dir: sw_corrupt\n",
    "sw_corrupt/sweep.json": "{not json",
    "sw_list/sweep.json": "[]",
    "a_run/metrics.json": "{}",
    "a_study/tune.json": "{}",
    "sw_nocells/sweep.json": "{}",
    "rep_text/cells/0123/cell.json": "{not json",
    "rep_list/cells/0123/cell.json": "[]",
    "rep_keys/cells/0123/cell.json": json.dumps({"hash": "0123"}),
}

# (id, argv, a needle of the message)
CASES = [
    # splits and labels of a user's graph
    ("empty train mask", ["train", *FILE, "data.path=empty_train.pt"], "train_mask selects no node"),
    ("empty val mask", ["train", *FILE, "data.path=empty_val.pt"], "val_mask selects no node"),
    ("empty test mask", ["train", *FILE, "data.path=empty_test.pt"], "test_mask selects no node"),
    ("train = val = test", ["train", *FILE, "data.path=same_masks.pt"], "in both data.train_mask and data.val_mask"),
    ("label 10^6", ["train", *FILE, "data.path=label_1e6.pt"], "1000001 classes"),
    ("label 10^9", ["train", *FILE, "data.path=label_1e9.pt"], "renumber the labels"),
    ("fractional edges", ["train", *FILE, "data.path=frac_edges.pt"], "integer node indices"),
    ("sparse x", ["train", *FILE, "data.path=sparse_x.pt"], "sparse"),
    ("NaN features", ["train", *FILE, "data.path=nan_x.pt"], "NaN/Inf"),
    ("inf features", ["train", *FILE, "data.path=inf_x.pt"], "NaN/Inf"),
    ("NaN features graphml", ["train", *FILE, "data.path=nan.graphml"], "NaN/Inf"),
    ("0-node graph", ["train", *FILE, "data.path=no_nodes.pt"], "no nodes"),
    ("edges (E, 2)", ["train", *FILE, "data.path=edges_e2.pt"], "(2, E)"),
    ("edge out of range", ["train", *FILE, "data.path=edges_out.pt"], f"node {N + 5}"),
    ("labels too few", ["train", *FILE, "data.path=y_short.pt"], "one label per node"),
    ("fractional labels", ["train", *FILE, "data.path=y_fraction.pt"], "integers"),
    ("mask of 0.5", ["train", *FILE, "data.path=mask_half.pt"], "val_mask holds 0.5"),
    ("mask too short", ["train", *FILE, "data.path=masks_short.pt"], "one entry per node"),
    ("x 3-D", ["train", *FILE, "data.path=x_3d.pt"], "features have shape"),
    ("split out of range", ["train", *FILE, "data.path=two_splits.pt", "data.split=5"], "data.split=5"),
    ("not a Data", ["train", *FILE, "data.path=not_data.pt"], "not a torch_geometric.data.Data"),
    ("not a torch file", ["train", *FILE, "data.path=garbage.pt"], "cannot read it"),
    ("missing graph file", ["train", *FILE, "data.path=missing.pt"], "no such file"),
    ("unknown extension", ["train", *FILE, "data.path=list.yaml"], "unknown extension"),
    ("features rows", ["train", *FILE, "data.path=good.pt", "data.features=features_rows.csv"], "one row per node"),
    ("train_fraction > 1", ["train", *FILE, "data.path=good.pt", "data.train_fraction=1.5"], "train_fraction"),
    # configuration
    ("lr inf", ["train", *CSBM, "train.lr=inf"], "train.lr=inf must be a finite number > 0"),
    ("lr nan", ["train", *CSBM, "train.lr=nan"], "train.lr=nan must be a finite number > 0"),
    ("lr 0", ["train", *CSBM, "train.lr=0"], "train.lr=0.0 must be a finite number > 0"),
    ("lr negative", ["train", *CSBM, "train.lr=-1"], "train.lr"),
    ("weight_decay nan", ["train", *CSBM, "train.weight_decay=nan"], "train.weight_decay"),
    ("tau inf", ["train", *CSBM, "model.tau=inf"], "model.tau"),
    ("unknown key", ["train", *CSBM, "model.bogus=1"], "model.bogus"),
    ("wrong type", ["train", *CSBM, "model.num_layers=abc"], "model.num_layers"),
    ("negative epochs", ["train", *CSBM, "train.epochs=-1"], "train.epochs"),
    ("fractional epochs", ["train", *CSBM, "train.epochs=1.5"], "train.epochs"),
    ("override without =", ["train", *CSBM, "foo"], "key=value"),
    ("train unknown option after an override", ["train", *CSBM, "--bogus"], "unrecognized arguments: --bogus"),
    ("unknown data set", ["train", *CSBM, "data.name=nonexistent"], "unknown data set"),
    ("unknown residual", ["train", *CSBM, "model.residual=bogus"], "model.residual"),
    ("missing plugin", ["train", *CSBM, "imports=[no_such_module_xyz]"], "no_such_module_xyz"),
    ("dropout 2", ["train", *CSBM, "model.dropout=2"], "model.dropout"),
    ("config not YAML", ["train", "not_yaml.yaml", *CSBM], "not_yaml.yaml"),
    ("config missing", ["train", "missing.yaml", *CSBM], "config file not found"),
    ("config a list", ["train", "list.yaml", *CSBM], "mapping"),
    ("resume without checkpoints", ["train", *CSBM, "--resume"], "checkpoint_every"),
    ("data.root a file", ["train", *CSBM, "data.name=cora", "data.root=good.pt"], "a file, not a folder"),
    ("model too large", ["train", *CSBM, "model.hidden_channels=10000000000"], "does not fit in memory"),
    ("per_class without validation nodes", ["train", *CSBM, "data.split_mode=per_class", "data.num_val=0",
                                            "data.num_test=50"],
     "val_mask selects no node"),
    # devices
    ("device mps", ["train", *CSBM, "train.device=mps"], "train.device='mps'"),
    ("device tpu", ["train", *CSBM, "train.device=tpu"], "train.device='tpu'"),
    ("device meta", ["train", *CSBM, "train.device=meta"], "train.device='meta'"),
    ("device xla", ["train", *CSBM, "train.device=xla"], "train.device='xla'"),
    ("device empty", ["train", *CSBM, "train.device="], "train.device"),
    # sweeps
    ("sweep bad base data", ["sweep", "sweep_nan.yaml", "--no-progress"], "NaN/Inf"),
    ("sweep sparse base data", ["sweep", "sweep_sparse.yaml", "--no-progress"], "sparse"),
    ("sweep bad key", ["sweep", "sweep_bad_key.yaml"], "model.bogus"),
    ("sweep bad grid value", ["sweep", "sweep_bad_value.yaml"], "model.num_layers=-2"),
    ("sweep unknown key", ["sweep", "sweep_unknown.yaml"], "'bogus'"),
    ("sweep empty grid list", ["sweep", "sweep_empty_list.yaml"], "non-empty list"),
    ("sweep file missing", ["sweep", "missing.yaml"], "not found"),
    ("sweep file not YAML", ["sweep", "not_yaml.yaml"], "not_yaml.yaml"),
    ("sweep corrupted sweep.json", ["sweep", "sweep_ok.yaml", "--no-progress"], "sweep.json is corrupted"),
    ("sweep sweep.json a list", ["sweep", "sweep_ok.yaml", "out_dir=sw_list", "--no-progress"],
     "sweep.json is corrupted"),
    ("sweep sweep.json without cells", ["sweep", "sweep_ok.yaml", "out_dir=sw_nocells", "--no-progress"],
     "its 'cells' is missing"),
    ("sweep into a train run", ["sweep", "sweep_ok.yaml", "out_dir=a_run", "--no-progress"], "holds a train run"),
    ("sweep into a tune study", ["sweep", "sweep_ok.yaml", "out_dir=a_study", "--no-progress"], "holds a tune study"),
    ("sweep devices mps", ["sweep", "sweep_ok.yaml", "out_dir=sw_new", "--devices", "mps", "--no-progress"],
     "--devices"),
    ("sweep device tpu", ["sweep", "sweep_ok.yaml", "out_dir=sw_new", "train.device=tpu", "--no-progress"],
     "train.device='tpu'"),
    ("sweep jobs 0", ["sweep", "sweep_ok.yaml", "out_dir=sw_new", "--jobs", "0"], "--jobs"),
    ("sweep jobs text", ["sweep", "sweep_ok.yaml", "--jobs", "x"], "--jobs"),
    ("sweep shard", ["sweep", "sweep_ok.yaml", "out_dir=sw_new", "--shard", "2/2"], "--shard"),
    ("sweep no file", ["sweep"], "required"),
    # report and demo
    ("report missing dir", ["report", "missing_dir"], "no sweep results"),
    ("report missing dir, --out", ["report", "missing_dir", "--out", "new_dir"], "no sweep results"),
    ("report no dir", ["report"], "required: dir"),
    ("report depth text", ["report", "rep_text", "--depth", "x"], "--depth"),
    ("report cell.json not JSON", ["report", "rep_text"], "cell.json is corrupted"),
    ("report cell.json a list", ["report", "rep_list"], "cell.json is corrupted"),
    ("report cell.json without keys", ["report", "rep_keys"], "'params'"),
    ("demo depths 0", ["demo", "--depths", "0"], "--depths"),
    ("demo depths text", ["demo", "--depths", "x"], "--depths"),
    ("demo seeds negative", ["demo", "--seeds", "-1"], "--seeds"),
    ("demo epochs 0", ["demo", "--epochs", "0"], "--epochs"),
    ("demo jobs 0", ["demo", "--jobs", "0"], "--jobs"),
    ("demo unknown option", ["demo", "--bogus"], "--bogus"),
    ("demo into a corrupted sweep", ["demo", "--out", "sw_corrupt", "--depths", "1"], "sweep.json is corrupted"),
    ("unknown command", ["frobnicate"], "invalid choice"),
]


def _write_inputs(root: Path) -> None:
    for name, content in GRAPHS.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content)
        else:
            torch.save(content, path)


def _tree(root: Path) -> dict:
    """Every path under ``root`` with the hash of its content (``None``: a folder)."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    _write_inputs(root)
    return root


def _run(argv, cwd: Path, capsys, monkeypatch) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)  # the case means "a machine without it"
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code
    return code, capsys.readouterr().err


def _assert_one_line_error(code, err: str, needle: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("wavygraph: error: "), err
    assert needle in lines[0], lines[0]


@pytest.mark.parametrize("argv, needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_one_line_exit_2_nothing_written(argv, needle, inputs, capsys, monkeypatch):
    before = _tree(inputs)  # the working directory: every case's inputs, shared by the cases
    code, err = _run(argv, inputs, capsys, monkeypatch)
    _assert_one_line_error(code, err, needle)
    assert _tree(inputs) == before  # no out_dir, no sweep folder, no demo file; corrupted files unchanged


@pytest.mark.parametrize("argv, needle", [
    (["-m", "wavygraph", "train", *FILE, "data.path=sparse_x.pt"], "sparse"),
    pytest.param(["-m", "wavygraph", "report", "missing_dir"], "no sweep results", marks=pytest.mark.slow),
], ids=["train sparse x", "report missing dir"])
def test_bad_input_in_a_real_process(argv, needle, inputs, tmp_path):
    _write_inputs(tmp_path)
    before = _tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    _assert_one_line_error(proc.returncode, proc.stderr, needle)
    assert _tree(tmp_path) == before


def _data(**over):
    if over.get("x") == "csr":
        with warnings.catch_warnings():  # torch: "Sparse CSR tensor support is in beta state"
            warnings.simplefilter("ignore")
            over["x"] = torch.randn(N, 4).to_sparse_csr()
    g = _graph(**over)
    y = g.y
    return g, DatasetInfo("toy", "multiclass", "acc", 4, int(y.max()) + 1)


@pytest.mark.parametrize("over, needle", [
    (dict(train_mask=_mask(0, 0)), "train_mask selects no node"),
    (dict(val_mask=_mask(0, 0)), "val_mask selects no node"),
    (dict(test_mask=_mask(0, 0)), "test_mask selects no node"),
    (dict(val_mask=_mask(11, 18)), "1 node(s) are in both data.train_mask and data.val_mask"),
    (dict(test_mask=_mask(0, N)), "in both data.train_mask and data.test_mask"),
    (dict(test_mask=_mask(17, N)), "in both data.val_mask and data.test_mask"),
    (dict(x="csr"), "sparse"),
], ids=["empty train", "empty val", "empty test", "train-val", "train-test", "val-test", "sparse csr"])
def test_check_data_refuses_empty_and_overlapping_parts(over, needle):
    with pytest.raises(InvalidDataError) as err:
        check_data(*_data(**over))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_masks_of_ones_and_zeros_are_masks(inputs, capsys, monkeypatch, tmp_path):
    """Integer or float 0/1 masks are read as the boolean masks they mean."""
    import shutil

    shutil.copy(inputs / "mask_01.pt", tmp_path / "mask_01.pt")
    code, err = _run(["train", *FILE, "data.path=mask_01.pt"], tmp_path, capsys, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "out" / "metrics.json").is_file()


def test_class_count_bound():
    """Classes may be left empty up to max(2 * distinct labels, MAX_SPARSE_CLASSES) classes, not beyond."""
    check_data(*_data(y=_label(MAX_SPARSE_CLASSES - 1)))  # 1000 classes, 4 used: at the bound
    with pytest.raises(InvalidDataError, match="renumber the labels"):
        check_data(*_data(y=_label(MAX_SPARSE_CLASSES)))  # 1001 classes, 4 used
    many = torch.arange(N) * 100  # 24 distinct labels up to 2300: 2301 classes > max(48, 1000)
    with pytest.raises(InvalidDataError, match="24 distinct labels but 2301 classes"):
        check_data(*_data(y=many))
    dense = torch.arange(N) % 3
    check_data(*_data(y=dense))


def test_devices_that_do_not_exist(monkeypatch):
    from wavygraph.config import ConfigError
    from wavygraph.train.env import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert str(resolve_device("cuda:1")) == "cuda:1"
    with pytest.raises(ConfigError, match=r"has 2 CUDA device\(s\) \(cuda:0..cuda:1\)"):
        resolve_device("cuda:7")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="MPS is not available"):
        resolve_device("mps")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert str(resolve_device("mps")) == "mps"


def test_non_finite_loss_stops_the_run_and_keeps_the_best_epoch(tmp_path, capsys, monkeypatch):
    """lr 1e30 trains epoch 1 (evaluated: the best so far), then the loss is NaN: one line naming the epoch
    and what to try, exit 2; model.pt holds epoch 1's weights, metrics.json the epochs before the stop."""
    argv = ["train", "data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=200", "train.epochs=5",
            "train.lr=1e30", "train.num_threads=1", "train.progress=false", "train.diagnostics=false",
            "model.hidden_channels=8", "out_dir=out"]
    code, err = _run(argv, tmp_path, capsys, monkeypatch)
    _assert_one_line_error(code, err, "the training loss became nan at epoch 2")
    assert "train.lr (now 1e+30)" in err and "best epoch so far (1)" in err
    ckpt = torch.load(tmp_path / "out" / "model.pt", weights_only=False)
    assert ckpt["epoch"] == 1 and all(bool(torch.isfinite(t).all()) for t in ckpt["state_dict"].values())
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["best_epoch"] == 1 and metrics["epochs"] == 1 and len(metrics["history"]) == 1


def test_the_exception_carries_the_epoch():
    from wavygraph.train.loop import NonFiniteLossError

    exc = NonFiniteLossError(7, float("inf"), 0, 0.5)
    assert exc.epoch == 7 and exc.best_epoch == 0
    assert "inf at epoch 7" in str(exc) and "initial weights" in str(exc) and "(now 0.5)" in str(exc)


def test_sweep_refuses_a_corrupted_cell_json_of_a_finished_cell(inputs, capsys, monkeypatch):
    """A finished cell whose cell.json is broken is named before the sweep writes anything (it would be
    skipped as done and break the report later)."""
    from wavygraph.sweep import expand, load_sweep

    monkeypatch.chdir(inputs)
    sweep = load_sweep("sweep_ok.yaml", ["out_dir=sw_cell"])
    cell = inputs / "sw_cell" / "cells" / expand(sweep)[0].hash / "cell.json"
    cell.parent.mkdir(parents=True)
    cell.write_text("[]")
    try:
        before = _tree(inputs)
        code, err = _run(["sweep", "sweep_ok.yaml", "out_dir=sw_cell", "--no-progress"], inputs, capsys, monkeypatch)
        _assert_one_line_error(code, err, f"{cell} is corrupted")
        assert _tree(inputs) == before
    finally:
        import shutil

        shutil.rmtree(inputs / "sw_cell")
