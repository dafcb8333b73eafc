"""Shared fixtures: tiny stand-ins of OGB data sets in OGB's on-disk format,
the registered residual kinds, and ``wavygraph train`` under torchrun."""
import os
import signal
import subprocess
import sys

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


def _descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (from /proc; torchrun starts each rank in a session of its own)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _torchrun_train(args, timeout: float = 300.0) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node 2 -m wavygraph train ARGS`` on one thread per rank, with
    faulthandler on: if it has not ended after ``timeout`` s (a generous bound, not a timing), its ranks
    and then the launcher get SIGABRT, so that every process prints its Python stacks, and the test fails
    with them; nothing of it is left running."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "wavygraph", "train", *map(str, args)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        ranks = _descendants(proc.pid)
        _signal_all(ranks, signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            _signal_all([proc.pid], signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
        finally:
            _signal_all(ranks + [proc.pid], signal.SIGKILL)
        pytest.fail(f"torchrun did not end within {timeout} s; the stacks of its processes:\n{err[-12000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture
def torchrun():
    """``torchrun(args, timeout=300)``: :func:`_torchrun_train`, a hang reported with its processes' stacks."""
    return _torchrun_train
