"""DIFFormer's random split protocol (``data.split_mode=per_class``)."""
import json

import pytest
import torch

from wavygraph import cli
from wavygraph.data import WavygraphDataError, load_dataset
from wavygraph.data.splits import per_class_split, random_split, select_split

from .test_registry import cora_root  # noqa: F401  (fixture)


def _labels(counts):
    y = torch.cat([torch.full((c,), k) for k, c in enumerate(counts)])
    return y[torch.randperm(y.numel(), generator=torch.Generator().manual_seed(5))]


def check_split(y, masks, per_class, num_val, num_test):
    train, val, test = masks
    assert not (train & val).any() and not (train & test).any() and not (val & test).any()
    assert torch.bincount(y[train], minlength=int(y.max()) + 1).tolist() == [per_class] * (int(y.max()) + 1)
    assert int(val.sum()) == num_val and int(test.sum()) == num_test


def test_class_balance_sizes_and_seeds():
    y = _labels([40, 90, 25, 300])
    state = torch.get_rng_state()
    masks = per_class_split(y, seed=3, per_class=20, num_val=50, num_test=100)
    assert torch.equal(torch.get_rng_state(), state)  # the global random state is untouched
    check_split(y, masks, 20, 50, 100)
    again = per_class_split(y, seed=3, per_class=20, num_val=50, num_test=100)
    assert all(torch.equal(a, b) for a, b in zip(masks, again))
    other = per_class_split(y, seed=4, per_class=20, num_val=50, num_test=100)
    assert not torch.equal(masks[0], other[0]) and not torch.equal(masks[2], other[2])
    # validation and test are drawn from all remaining nodes, not per class
    rest_classes = torch.bincount(y[masks[1] | masks[2]], minlength=4)
    assert rest_classes[3] > rest_classes[2]


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(per_class=25), "class 2 has 25 nodes"),
        (dict(num_val=200, num_test=200), "fewer than data.num_val"),
        (dict(per_class=0), "data.per_class must be a positive integer"),
    ],
)
def test_bad_splits_name_the_fix(kwargs, needle):
    y = _labels([40, 90, 25, 300])
    with pytest.raises(WavygraphDataError, match=needle):
        per_class_split(y, seed=0, **{"num_val": 50, "num_test": 100, **kwargs})


def test_multilabel_is_refused():
    with pytest.raises(WavygraphDataError, match="split_mode=given"):
        per_class_split(torch.zeros(10, 3), seed=0)


def test_cora_protocol(cora_root):  # noqa: F811
    public, _ = load_dataset("cora", str(cora_root))
    drawn, _ = load_dataset("cora", str(cora_root), split=2, split_mode="per_class")
    check_split(drawn.y, (drawn.train_mask, drawn.val_mask, drawn.test_mask), 20, 500, 1000)
    assert not torch.equal(drawn.train_mask, public.train_mask)
    assert torch.equal(drawn.x, public.x) and torch.equal(drawn.edge_index, public.edge_index)
    with pytest.raises(WavygraphDataError, match="one split"):
        load_dataset("cora", str(cora_root), split=2)  # the public split has no seed


def test_cli_runs_the_protocol(cora_root, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    args = ["train", "configs/difformer/cora.yaml", f"data.root={cora_root}", "data.split_mode=per_class",
            "data.split=1", "model.num_layers=1", "model.hidden_channels=8", "train.epochs=2",
            "train.progress=false", "train.diagnostics=false", "train.num_threads=1", f"out_dir={out}"]
    assert cli.main(args) == 0
    assert json.loads((out / "metrics.json").read_text())["epochs"] == 2
    assert "split_mode: per_class" in (out / "config.yaml").read_text()
    assert cli.main(args[:-1] + ["data.split_mode=random", f"out_dir={tmp_path / 'bad'}"]) == 2
    assert not (tmp_path / "bad").exists()


def test_select_split_takes_one_column_and_a_shared_mask_whole():
    cols = torch.tensor([[True, False, False], [False, True, False], [False, False, True], [True, True, False]])
    shared = torch.tensor([False, False, True, True])  # (N,): one split for all, as WikiCS's test mask
    for split in range(3):
        got = select_split([cols, shared], split, ValueError)
        assert torch.equal(got[0], torch.tensor([r[split] for r in cols.tolist()])) and got[1] is shared
    with pytest.raises(WavygraphDataError, match=r"^3 columns$"):  # too_few gets the column count
        select_split([cols, shared], 3, lambda count: WavygraphDataError(f"{count} columns"))


def test_random_split_is_a_seeded_permutation_cut_in_three():
    masks = random_split(torch.zeros(10), seed=4, train=0.3, val=0.2)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(4))  # the literal draw
    for mask, part in zip(masks, (perm[:3], perm[3:5], perm[5:])):
        assert sorted(mask.nonzero().view(-1).tolist()) == sorted(part.tolist())
