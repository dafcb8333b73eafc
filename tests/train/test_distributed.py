"""Multi-process training with torch.distributed (gloo, CPU, 2 processes via torchrun)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from wavygraph import cli
from wavygraph.train.distributed import DistContext, chunks_of_rank

REPO = Path(__file__).resolve().parents[2]


def shared_dir():
    for cand in (REPO / ".." / "shared", Path("/work/shared")):
        if (cand / "data" / "planetoid" / "Cora" / "raw").is_dir():
            return cand
    return None


def test_chunks_of_rank_split_evenly_and_cover_all():
    parts = [torch.tensor([i]) for i in range(5)]
    shares = [chunks_of_rank(parts, DistContext(rank=r, world_size=2, enabled=True)) for r in range(2)]
    assert [len(s) for s in shares] == [3, 3]  # padded to a multiple of the world size
    seen = {int(p) for s in shares for p in s}
    assert seen == set(range(5))
    assert not set(map(int, shares[0])) & set(map(int, shares[1][:2]))  # disjoint before the padding
    assert chunks_of_rank(parts, DistContext()) == parts


def test_distributed_without_torchrun_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    argv = ["train", "data.name=csbm", "data.csbm.preset=small", "train.batch_size=100", "train.distributed=true",
            f"out_dir={tmp_path / 'o'}", "train.progress=false"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "torchrun" in err
    assert not (tmp_path / "o").exists()
    assert cli.main(argv[:3] + ["train.distributed=true", f"out_dir={tmp_path / 'o'}"]) == 2  # no batch_size
    assert "batch_size" in capsys.readouterr().err


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_ddp_model_lives_when_the_process_group_is_destroyed(tmp_path, monkeypatch):
    """A one-process gloo group in this process (torchrun's variables set by hand): when the run leaves
    the group, no DistributedDataParallel model is alive. Its reducer holds the group; as the group's last
    holder it would destroy the group while keeping the GIL and deadlock with gloo's worker threads at exit
    (torch issue 56297; a rank of the torchrun tests then never ended)."""
    import gc

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", str(_free_port()))):
        monkeypatch.setenv(key, value)
    alive = []
    real = dist.destroy_process_group

    def destroy(*args, **kwargs):
        alive.append(sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects()))
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "destroy_process_group", destroy)
    argv = ["train", "data.name=csbm", "data.csbm.preset=small", "model.num_layers=2", "train.epochs=2",
            "train.batch_size=500", "train.distributed=true", "train.progress=false", "train.num_threads=1",
            f"out_dir={tmp_path / 'o'}"]
    assert cli.main(argv) == 0
    assert alive == [0] and not dist.is_initialized()
    assert json.loads((tmp_path / "o" / "metrics.json").read_text())["world_size"] == 1


@pytest.mark.slow  # torchrun: three processes training on Cora
def test_torchrun_two_processes_match_single_process_on_cora(tmp_path, torchrun):
    shared = shared_dir()
    if shared is None:
        pytest.skip("shared Cora raw files not available")
    if shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists():
        pytest.skip("torchrun not installed")
    shutil.copytree(shared / "data" / "planetoid" / "Cora" / "raw", tmp_path / "data" / "Cora" / "raw")
    common = [str(REPO / "configs" / "cora.yaml"), f"data.root={tmp_path / 'data'}", "train.batch_size=1000",
              "train.epochs=80", "train.eval_every=2", "model.num_layers=2", "train.progress=false",
              "train.diagnostics=false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = subprocess.run([sys.executable, "-m", "wavygraph", "train", *common, f"out_dir={tmp_path / 'one'}"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr
    multi = torchrun([*common, "train.distributed=true", f"out_dir={tmp_path / 'two'}"])
    assert multi.returncode == 0, multi.stderr[-3000:]
    assert multi.stdout.count('"metric"') == 1  # only rank 0 reports and writes
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    two = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert two["world_size"] == 2 and one["world_size"] == 1
    print(f"single-process test acc {one['test']:.4f}, 2-process {two['test']:.4f}")
    assert two["test"] > 0.5  # it learned
    assert abs(two["test"] - one["test"]) <= 0.02
    # the two processes split the work: their runs are not the same run
    assert two["history"] != one["history"]
