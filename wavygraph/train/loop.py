"""Training and evaluation of :class:`~wavygraph.nn.WavyDIFFormer` on one
node-prediction data set.

Training is full-batch, or DIFFormer's random-partition mini-batches when
``train.batch_size`` is set: every epoch a random permutation of the nodes
is cut into chunks of ``batch_size`` and the model sees each chunk's induced
subgraph (nodes relabelled in the chunk's order), one optimiser step per
chunk, the loss on the chunk's training nodes.

Evaluation covers every node. With ``train.eval_batch_size`` (default:
``train.batch_size``) set, the nodes are taken in consecutive chunks and
each chunk is evaluated on its induced subgraph, which bounds the memory.
For the global attention this means attention *within each chunk* rather
than over the whole graph, as in DIFFormer's large-graph evaluation; set
``train.eval_batch_size=0`` for one exact full-graph pass.

The reported test score is the one at the epoch of the best validation
score (early model selection); that epoch's weights are the checkpoint.
"""
from __future__ import annotations

import copy
import math
import os
import random
import resource
import sys
import time
from dataclasses import asdict

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import Tensor
from torch_geometric.data import Data
from tqdm.auto import tqdm

from wavygraph.config import ConfigError, to_yaml
from wavygraph.data import DatasetInfo, induced_subgraph, load_dataset, node_chunks, random_partition
from wavygraph.nn import WavyDIFFormer, gcn_adjacency

from .files import atomic_torch_save, atomic_write_json, atomic_write_text

try:
    from wavygraph.diagnostics import layer_diagnostics
except ImportError:
    layer_diagnostics = None

SPLITS = (("train", "train_mask"), ("val", "val_mask"), ("test", "test_mask"))


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU runs are then repeatable)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"train.device={name!r} is not a torch device") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"train.device={name!r} but CUDA is not available; use train.device=cpu")
    return device


def build_model(cfg: DictConfig, data_info: DatasetInfo) -> WavyDIFFormer:
    """The model of ``cfg.model`` sized for ``data_info``."""
    opts = OmegaConf.to_container(cfg.model, resolve=True)
    return WavyDIFFormer(data_info.num_features, out_channels=data_info.num_outputs, **opts)


def _graph_input(data: Data, device: torch.device) -> tuple[Tensor, Tensor]:
    """x and the GCN propagation matrix (built once) on ``device``."""
    x = data.x.to(device)
    adj = gcn_adjacency(data.edge_index.to(device), data.num_nodes, x.dtype)
    return x, adj


def loss_fn(logits: Tensor, y: Tensor, task: str) -> Tensor:
    if task == "multilabel":
        return F.binary_cross_entropy_with_logits(logits, y.float())
    return F.cross_entropy(logits, y)


@torch.no_grad()
def predict(model: torch.nn.Module, data: Data, chunk_size: int | None = None, device=None) -> Tensor:
    """Outputs ``(N, out)`` for every node, on the CPU: one full-graph pass,
    or consecutive node chunks of ``chunk_size`` on their induced subgraphs."""
    device = device or next(model.parameters()).device
    model.eval()
    outs = []
    for nodes in node_chunks(data.num_nodes, chunk_size):
        part = data if nodes.numel() == data.num_nodes else induced_subgraph(data, nodes)
        x, adj = _graph_input(part, device)
        outs.append(model(x, adj).float().cpu())
    return torch.cat(outs, 0)


def evaluate(
    model: torch.nn.Module, data: Data, info: DatasetInfo, chunk_size: int | None = None, device=None
) -> dict[str, float]:
    """``{"train", "val", "test"}`` scores (``info.metric``) and ``"loss"``
    on the validation nodes; see :func:`predict` for ``chunk_size``."""
    logits = predict(model, data, chunk_size, device)
    y = data.y.cpu()
    scores = {key: info.score(y[data[mask].cpu()], logits[data[mask].cpu()]) for key, mask in SPLITS}
    val = data.val_mask.cpu()
    scores["val_loss"] = loss_fn(logits[val], y[val], info.task).item()
    return scores


def train_epoch(
    model, optimizer, data: Data, info: DatasetInfo, batch_size: int | None, device, generator, full_input=None
) -> float:
    """One epoch; returns the mean training loss."""
    model.train()
    if not batch_size or batch_size >= data.num_nodes:
        parts = [None]
    else:
        parts = random_partition(data.num_nodes, batch_size, generator)
    losses, weights = [], []
    for nodes in parts:
        if nodes is None:
            part = data
            x, adj = full_input if full_input is not None else _graph_input(data, device)
        else:
            part = induced_subgraph(data, nodes)
            x, adj = _graph_input(part, device)
        mask = part.train_mask.to(device)
        count = int(mask.sum())
        if count == 0:
            continue
        optimizer.zero_grad(set_to_none=True)
        out = model(x, adj)
        loss = loss_fn(out[mask], part.y.to(device)[mask], info.task)
        loss.backward()
        optimizer.step()
        losses.append(loss.item() * count)
        weights.append(count)
    return sum(losses) / max(sum(weights), 1)


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory: CUDA's max allocated on a GPU, else the process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10


def run(cfg: DictConfig) -> dict:
    """Train per ``cfg``, write ``config.yaml``, ``model.pt`` and
    ``metrics.json`` (each atomically) into ``cfg.out_dir``, and return the
    metrics: ``metric``, ``best_val``, ``test`` (at the best validation
    epoch), ``train``, ``best_epoch``, ``epochs``, ``seconds``,
    ``seconds_per_epoch``, ``num_params``, ``peak_memory_mb``, ``history``
    and, with ``train.diagnostics``, ``diagnostics``.
    """
    start = time.time()
    t = cfg.train
    device = resolve_device(t.device)
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    seed_everything(t.seed)
    options = dict(OmegaConf.to_container(cfg.data.csbm)) if cfg.data.name.lower() == "csbm" else {}
    data, info = load_dataset(cfg.data.name, cfg.data.root, cfg.data.split, cfg.data.normalize_features, **options)
    model = build_model(cfg, info).to(device)
    num_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    generator = torch.Generator().manual_seed(t.seed)
    eval_chunk = t.batch_size if t.eval_batch_size is None else t.eval_batch_size
    full_input = _graph_input(data, device) if not t.batch_size else None

    out_dir = str(cfg.out_dir)
    os.makedirs(out_dir, exist_ok=True)
    atomic_write_text(os.path.join(out_dir, "config.yaml"), to_yaml(cfg))

    best = {"val": -math.inf, "test": float("nan"), "train": float("nan"), "epoch": 0}
    best_state = copy.deepcopy(model.state_dict())
    history = []
    since_best = 0
    epoch_seconds = []
    bar = tqdm(range(1, t.epochs + 1), desc=f"{info.name} {cfg.model.residual} L{cfg.model.num_layers}",
               disable=not t.progress, file=sys.stderr, dynamic_ncols=True)
    epoch = 0
    for epoch in bar:
        tick = time.time()
        loss = train_epoch(model, optimizer, data, info, t.batch_size, device, generator, full_input)
        epoch_seconds.append(time.time() - tick)
        if epoch % t.eval_every and epoch != t.epochs:
            continue
        scores = evaluate(model, data, info, eval_chunk, device)
        history.append({"epoch": epoch, "loss": loss, **scores})
        if scores["val"] > best["val"]:
            best = {"val": scores["val"], "test": scores["test"], "train": scores["train"], "epoch": epoch}
            best_state = copy.deepcopy(model.state_dict())
            since_best = 0
        else:
            since_best += 1
        bar.set_postfix(loss=f"{loss:.3f}", val=f"{scores['val']:.4f}", best_val=f"{best['val']:.4f}",
                        test=f"{best['test']:.4f}")
        if t.patience and since_best >= t.patience:
            break
    bar.close()

    model.load_state_dict(best_state)
    metrics = {
        "dataset": info.name,
        "metric": info.metric,
        "best_val": best["val"],
        "test": best["test"],
        "train": best["train"],
        "best_epoch": best["epoch"],
        "epochs": epoch,
        "seconds": None,
        "seconds_per_epoch": float(np.mean(epoch_seconds)) if epoch_seconds else None,
        "num_params": num_params,
        "peak_memory_mb": None,
        "residual": cfg.model.residual,
        "num_layers": cfg.model.num_layers,
        "history": history,
    }
    if t.diagnostics and layer_diagnostics is not None:
        model.eval()
        diag_data = Data(x=data.x, edge_index=data.edge_index, y=data.y, num_nodes=data.num_nodes).to(device)
        try:
            with torch.no_grad():
                diag = layer_diagnostics(model, diag_data)
            metrics["diagnostics"] = {k: [float(v) for v in vals] for k, vals in diag.items()}
        except Exception as exc:  # a failing measure must not lose the trained run
            print(f"wavygraph: warning: diagnostics failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    checkpoint = {
        "state_dict": best_state,
        "config": OmegaConf.to_container(cfg, resolve=True),
        "info": {k: v for k, v in asdict(info).items() if k != "extra"},
        "epoch": best["epoch"],
        "best_val": best["val"],
    }
    atomic_torch_save(checkpoint, os.path.join(out_dir, "model.pt"))
    metrics["peak_memory_mb"] = peak_memory_mb(device)
    metrics["seconds"] = time.time() - start
    atomic_write_json(os.path.join(out_dir, "metrics.json"), metrics)
    return metrics
