"""Bad inputs at the Python API and the CLI fail with our own error types and
one-line messages; edge cases (empty graphs, single nodes, isolated nodes,
duplicate/directed edges, deep stacks, adversarial q/k) stay finite."""
import pytest
import torch

from wavygraph import cli
from wavygraph.data import InvalidDataError, WavygraphDataError, check_data, load_dataset
from wavygraph.data.info import DatasetInfo
from wavygraph.nn import DIFFormerConv, WavyDIFFormer
from wavygraph.nn.functional import all_pair_attention
from wavygraph.nn.validate import InputError
from wavygraph.train.evaluation import loss_fn
from torch_geometric.data import Data
from wavygraph.nn.model_args import RECIPE_ARGS


def recipe(*sizes, **kw):
    """WavyDIFFormer with the depth recipe's settings (RECIPE_ARGS), the class defaults these tests were written for."""
    return WavyDIFFormer(*sizes, **{**RECIPE_ARGS, **kw})


def _model(**kw):
    torch.manual_seed(0)
    return recipe(4, 8, 3, num_layers=2, **kw)


def _graph(n=6):
    x = torch.randn(n, 4)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    return x, ei


X, EI = _graph()
NAN_X = X.clone()
NAN_X[2, 1] = float("nan")
INF_X = X.clone()
INF_X[0, 0] = float("inf")

# (name, callable, expected error type, needle of the message)
MODEL_CASES = [
    ("x rank 1", lambda m: m(X[:, 0], EI), "x must have shape"),
    ("x rank 3", lambda m: m(X[None], EI), "x must have shape"),
    ("x wrong width", lambda m: m(torch.randn(6, 5), EI), "x must have shape (N, 4)"),
    ("x not a tensor", lambda m: m(X.tolist(), EI), "x must have shape"),
    ("x integer", lambda m: m(X.long(), EI), "floating"),
    ("x NaN", lambda m: m(NAN_X, EI), "NaN/Inf"),
    ("x Inf", lambda m: m(INF_X, EI), "NaN/Inf"),
    ("edge_index float", lambda m: m(X, EI.float()), "integer"),
    ("edge_index bool", lambda m: m(X, EI.bool()), "integer"),
    ("edge_index (E, 2)", lambda m: m(X, EI.t().contiguous()), "(2, E)"),
    ("edge_index rank 1", lambda m: m(X, EI[0]), "(2, E)"),
    ("edge_index out of range", lambda m: m(X, torch.tensor([[0, 6], [1, 2]])), "refers to node 6"),
    ("edge_index negative", lambda m: m(X, torch.tensor([[0, -1], [1, 2]])), "negative"),
    ("edge_index missing", lambda m: m(X), "needs edge_index"),
    ("edge_index list", lambda m: m(X, [[0, 1], [1, 2]]), "tensor"),
    ("sparse adj wrong size", lambda m: m(X, torch.eye(5).to_sparse_csr()), "sparse matrix"),
    ("batch too short", lambda m: m(X, EI, torch.zeros(5, dtype=torch.long)), "batch must have shape (6,)"),
    ("batch float", lambda m: m(X, EI, torch.zeros(6)), "integer graph indices"),
    ("batch negative", lambda m: m(X, EI, torch.tensor([0, 0, -1, 1, 1, 1])), "negative graph index"),
    ("batch 2-D", lambda m: m(X, EI, torch.zeros(6, 1, dtype=torch.long)), "batch must have shape"),
]


@pytest.mark.parametrize("name, call, needle", MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_model_bad_inputs(name, call, needle):
    with pytest.raises(InputError) as err:
        call(_model())
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


@pytest.mark.parametrize("name, call, needle", MODEL_CASES[:4] + MODEL_CASES[7:], ids=[c[0] for c in MODEL_CASES[:4] + MODEL_CASES[7:]])
def test_conv_bad_inputs(name, call, needle):
    conv = DIFFormerConv(4)
    with pytest.raises(InputError) as err:
        call(conv)
    assert needle.replace("(N, 4)", "(N, 4)") in str(err.value)


CONSTRUCT_CASES = [
    ("unknown residual", lambda: WavyDIFFormer(4, 8, 3, residual="waves"), ValueError, "'light_wave'"),
    ("unknown kernel", lambda: WavyDIFFormer(4, 8, 3, kernel="softmax"), ValueError, "'sigmoid'"),
    ("tau zero", lambda: WavyDIFFormer(4, 8, 3, tau=0.0), ValueError, "tau"),
    ("tau negative", lambda: WavyDIFFormer(4, 8, 3, tau=-1.0), ValueError, "tau"),
    ("zero layers", lambda: WavyDIFFormer(4, 8, 3, num_layers=0), InputError, "num_layers"),
    ("dropout 1", lambda: WavyDIFFormer(4, 8, 3, dropout=1.0), InputError, "dropout"),
    ("head_channels 0", lambda: DIFFormerConv(8, heads=3, head_channels=0), ValueError, "head_channels"),
    ("unknown metric", lambda: DatasetInfo("x", "multiclass", "f1", 4, 3), WavygraphDataError, "'rocauc'"),
    ("unknown task", lambda: DatasetInfo("x", "regression", "acc", 4, 3), WavygraphDataError, "'multilabel'"),
    ("unknown data set", lambda: load_dataset("coraa"), WavygraphDataError, "ogbn-arxiv"),
    ("negative split", lambda: load_dataset("csbm", split=-1, preset="small"), WavygraphDataError, "split"),
]


@pytest.mark.parametrize("name, call, etype, needle", CONSTRUCT_CASES, ids=[c[0] for c in CONSTRUCT_CASES])
def test_bad_options(name, call, etype, needle):
    with pytest.raises(etype) as err:
        call()
    assert needle in str(err.value) and "\n" not in str(err.value)


def _data(n=6, **over):
    x, ei = _graph(n)
    m = torch.zeros(n, dtype=torch.bool)
    m[:2] = True
    d = dict(x=x, edge_index=ei, y=torch.tensor([0, 1, 2, 0, 1, 2]), train_mask=m, val_mask=m.roll(2),
             test_mask=m.roll(4), num_nodes=n)
    d.update(over)
    return Data(**d), DatasetInfo("toy", "multiclass", "acc", 4, 3)


DATA_CASES = [
    ("labels out of range", dict(y=torch.tensor([0, 1, 7, 0, 1, 2])), "labels must lie in [0, 3)"),
    ("negative labels", dict(y=torch.tensor([0, -1, 2, 0, 1, 2])), "labels must lie"),
    ("multi-label y for multi-class", dict(y=torch.ones(6, 3)), "multi-label"),
    ("NaN features", dict(x=NAN_X), "NaN/Inf"),
    ("edges out of range", dict(edge_index=torch.tensor([[0], [9]])), "outside [0, 6)"),
    ("float edges", dict(edge_index=EI.float()), "integer"),
    ("mask not bool", dict(train_mask=torch.ones(6)), "train_mask"),
    ("x wrong width", dict(x=torch.randn(6, 2)), "data.x must have shape (N, 4)"),
]


@pytest.mark.parametrize("name, over, needle", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_bad_data(name, over, needle):
    data, info = _data(**over)
    with pytest.raises(InvalidDataError) as err:
        check_data(data, info)
    assert needle in str(err.value)


def test_good_data_passes():
    check_data(*_data())


LOSS_CASES = [
    ("labels out of range", torch.randn(4, 3), torch.tensor([0, 1, 3, 2]), "multiclass", "[0, 3)"),
    ("multi-label to multi-class", torch.randn(4, 3), torch.ones(4, 3), "multiclass", "multi-label targets"),
    ("float labels", torch.randn(4, 3), torch.tensor([0.0, 1.0, 2.0, 1.0]), "multiclass", "integers"),
    ("multi-label wrong width", torch.randn(4, 3), torch.ones(4, 2), "multilabel", "shape (4, 3)"),
]


@pytest.mark.parametrize("name, logits, y, task, needle", LOSS_CASES, ids=[c[0] for c in LOSS_CASES])
def test_bad_targets(name, logits, y, task, needle):
    with pytest.raises(InvalidDataError, match=None) as err:
        loss_fn(logits, y, task)
    assert needle in str(err.value)


CLI_CASES = [
    (["model.residual=waves"], "light_wave"),
    (["model.kernel=softmax"], "model.kernel"),
    (["model.tau=0"], "model.tau"),
    (["model.tau=-0.5"], "model.tau"),
    (["data.name=nosuchset"], "unknown data set"),
    (["train.checkpoint_every=-1"], "train.checkpoint_every"),
    (["train.resume=true"], "checkpoint_every"),
    (["train.dist_backend=mpi"], "train.dist_backend"),
    (["train.distributed=true"], "batch_size"),
    (["model.heads=0"], "model.heads"),
    (["train.batch_size=-5"], "train.batch_size"),
    (["data.split=-1"], "data.split"),
]


@pytest.mark.parametrize("args, needle", CLI_CASES, ids=[" ".join(c[0]) for c in CLI_CASES])
def test_cli_bad_inputs_exit_2(tmp_path, capsys, args, needle):
    out = tmp_path / "out"
    argv = ["train", "data.name=csbm", "data.csbm.preset=small", *args, f"out_dir={out}", "train.progress=false"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.count("\n") == 0 and err.startswith("wavygraph: error: ")
    assert needle in err
    assert not out.exists()  # nothing written, no partial file


# ---------------------------------------------------------------- valid edge cases


@pytest.mark.parametrize("n", [0, 1])
def test_empty_graph_and_single_node_are_finite(residual_kind, n):
    m = _model(residual=residual_kind)
    x = torch.randn(n, 4, requires_grad=True)
    out = m(x, torch.empty(2, 0, dtype=torch.long))
    assert out.shape == (n, 3) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_isolated_duplicate_directed_edges_and_empty_batch_graphs():
    m = _model()
    x = torch.randn(6, 4)
    ei = torch.tensor([[0, 0, 0, 1], [1, 1, 1, 2]])  # node 3..5 isolated, (0,1) three times, directed
    out = m(x, ei)
    assert torch.isfinite(out).all()
    coalesced = m(x, torch.tensor([[0, 1], [1, 2]]))
    assert not torch.allclose(out, coalesced)  # duplicates count with their multiplicity (documented)
    batch = torch.tensor([0, 0, 0, 3, 3, 3])  # graphs 1 and 2 are empty
    assert torch.isfinite(m(x, ei, batch)).all()


def test_cli_exit_2_for_multilabel_to_multiclass_in_a_custom_loader(tmp_path, monkeypatch, capsys):
    """A registered loader that returns multi-label y for a multi-class task is refused at load time."""
    from wavygraph.data import registry

    def bad_loader(root=None, split=0, **_):
        return _data(y=torch.ones(6, 3))

    monkeypatch.setitem(registry.DATASETS, "badtoy", registry.DatasetSpec("badtoy", bad_loader, "bad", "pyg"))
    assert cli.main(["train", "data.name=badtoy", f"out_dir={tmp_path / 'o'}", "train.progress=false"]) == 2
    assert "multi-label" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- numerical care


@pytest.mark.slow  # 128 layers forward and backward, every kind, two dtypes
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_128_layers_stay_finite(residual_kind, dtype):
    torch.manual_seed(0)
    m = recipe(4, 8, 3, num_layers=128, residual=residual_kind, dropout=0.0)
    x = torch.randn(20, 4)
    ei = torch.randint(0, 20, (2, 40))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        out, hidden = m(x, ei, return_hidden=True)
    assert torch.isfinite(out.float()).all()
    assert all(torch.isfinite(h.float()).all() for h in hidden)
    out.float().sum().backward()
    for p in m.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all()


def _adversarial(n=32, h=2, d=8):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(n, h, d, generator=g)
    return {
        "all zero": (torch.zeros(n, h, d), torch.zeros(n, h, d)),
        "q zero": (torch.zeros(n, h, d), q),
        "huge": (q * 1e30, q * 1e30),
        "tiny": (q * 1e-30, q * 1e-30),
        "opposite signs": (q, -q),
        "one direction, opposite": (torch.ones(n, h, d), -torch.ones(n, h, d)),
        "one node dominates": (torch.cat([q[:1] * 1e20, q[1:]]), -torch.cat([q[:1] * 1e20, q[1:]])),
    }


@pytest.mark.parametrize("case", list(_adversarial()))
@pytest.mark.parametrize("qk_norm", ["global", "row"])
@pytest.mark.parametrize("batched", [False, True])
def test_adversarial_qk_finite_outputs_and_gradients(case, qk_norm, batched):
    q0, k0 = _adversarial()[case]
    q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
    v = torch.randn(q.shape[0], q.shape[1], 5, requires_grad=True)
    batch = torch.arange(q.shape[0]) % 3 if batched else None
    out = all_pair_attention(q, k, v, batch, "simple", qk_norm)
    assert torch.isfinite(out).all(), case
    (out.square().sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all(), case
    # the output is a weighted mean of the values: within their range
    assert out.abs().max() <= v.abs().max() * (1 + 1e-4) + 1e-6
    if case in ("tiny", "huge") and qk_norm == "global":
        # global normalisation makes the attention scale-free: as at scale 1
        q1, k1 = _adversarial()["opposite signs"][0], _adversarial()["opposite signs"][0]
        ref = all_pair_attention(q1, k1, v.detach(), batch, "simple", qk_norm)
        torch.testing.assert_close(out.detach(), ref, rtol=1e-5, atol=1e-5)


def test_simple_kernel_denominator_floor_with_exact_cancellation():
    """q~_i . sum_j k~_j = -N is reached when every k~_j = -q~_i for a unit q~_i: the true
    denominator is 0 (and so is the numerator); the floor keeps the output finite."""
    n = 4
    q = torch.zeros(n, 1, 2)
    q[:, 0, 0] = 1.0
    k = -q.clone()
    v = torch.randn(n, 1, 3)
    out = all_pair_attention(q.requires_grad_(), k.requires_grad_(), v, None, "simple", "row")
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
