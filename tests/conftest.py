"""Shared fixtures: tiny stand-ins of OGB data sets in OGB's on-disk format."""
import pytest
import torch

from wavygraph.data import write_ogb_node_dataset

OGB_NODES = 120


def _fake_graph(seed: int, n: int = OGB_NODES, m: int = 360):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (m,), generator=g)
    dst = (src + torch.randint(1, n, (m,), generator=g)) % n  # no self-loops
    edge_index = torch.stack([src, dst])
    perm = torch.randperm(n, generator=g)
    split = {"train": perm[: n // 2], "valid": perm[n // 2 : 3 * n // 4], "test": perm[3 * n // 4 :]}
    return g, edge_index, split


def write_fake_arxiv(root, seed: int = 0) -> None:
    g, edge_index, split = _fake_graph(seed)
    x = torch.randn(OGB_NODES, 16, generator=g)
    y = (x[:, :4].argmax(-1) * 10).long()  # learnable labels among the 40 classes
    years = torch.randint(2000, 2020, (OGB_NODES,), generator=g)
    write_ogb_node_dataset(str(root), "ogbn-arxiv", edge_index, y, split, x=x, node_files={"node_year": years})


def write_fake_proteins(root, seed: int = 1) -> None:
    g, edge_index, split = _fake_graph(seed)
    edge_attr = torch.rand(edge_index.shape[1], 8, generator=g)
    y = torch.randint(0, 2, (OGB_NODES, 112), generator=g)
    species = torch.randint(0, 3, (OGB_NODES,), generator=g)
    write_ogb_node_dataset(
        str(root), "ogbn-proteins", edge_index, y, split, edge_attr=edge_attr, node_files={"node_species": species}
    )


@pytest.fixture
def ogb_root(tmp_path):
    """A data root with stand-ins of ogbn-arxiv and ogbn-proteins (raw files only)."""
    root = tmp_path / "ogb"
    write_fake_arxiv(root)
    write_fake_proteins(root)
    return root


def _registered_kinds():
    from wavygraph.nn.steppers import STEPPERS

    return list(STEPPERS)


@pytest.fixture(params=_registered_kinds())
def residual_kind(request):
    """Every registered residual kind: the one list the tests iterate (a
    kind added to the registry is tested everywhere this fixture is used)."""
    return request.param
