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

from wavygraph.config import ConfigError, import_modules, to_yaml
from wavygraph.data import DatasetInfo, InvalidDataError, induced_subgraph, load_dataset, node_chunks, random_partition
from wavygraph.nn import WavyDIFFormer, gcn_adjacency
from wavygraph.utils import atomic_torch_save, atomic_write_json, atomic_write_text

from . import distributed as dist_utils
from .models import build_model, param_groups
from .resume import TrainState, restore, save_checkpoint

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


def _graph_input(data: Data, device: torch.device) -> tuple[Tensor, Tensor]:
    """x and the GCN propagation matrix (built once) on ``device``."""
    x = data.x.to(device)
    adj = gcn_adjacency(data.edge_index.to(device), data.num_nodes, x.dtype)
    return x, adj


def check_targets(logits: Tensor, y: Tensor, task: str) -> None:
    """Targets must fit the loss: multi-class ``(n,)`` integer labels in
    ``[0, classes)``, multi-label ``(n, tasks)``; raises :class:`InvalidDataError`."""
    if task == "multilabel":
        if tuple(y.shape) != tuple(logits.shape):
            raise InvalidDataError(f"multi-label targets must have shape {tuple(logits.shape)}, got {tuple(y.shape)}")
        return
    if y.dim() != 1:
        raise InvalidDataError(
            f"multi-label targets of shape {tuple(y.shape)} given to the multi-class (cross-entropy) loss; "
            "multi-class labels are one integer per node, shape (n,)"
        )
    if y.dtype.is_floating_point or y.dtype == torch.bool:
        raise InvalidDataError(f"multi-class labels must be integers, got dtype {y.dtype}")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= logits.shape[-1]):
        raise InvalidDataError(
            f"labels must lie in [0, {logits.shape[-1]}) for {logits.shape[-1]} classes, got {int(y.min())}..{int(y.max())}"
        )


def loss_fn(logits: Tensor, y: Tensor, task: str) -> Tensor:
    check_targets(logits, y, task)
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
    model, optimizer, data: Data, info: DatasetInfo, batch_size: int | None, device, generator, full_input=None,
    dist_ctx: "dist_utils.DistContext | None" = None,
) -> float:
    """One epoch; returns the mean training loss (of this rank's chunks).
    With a distributed ``dist_ctx`` the rank takes its share of the chunks
    (see :mod:`wavygraph.train.distributed`) and steps even on a chunk
    without training nodes, so that every rank joins every all-reduce."""
    model.train()
    if not batch_size or batch_size >= data.num_nodes:
        parts = [None]
    else:
        parts = random_partition(data.num_nodes, batch_size, generator)
    distributed = dist_ctx is not None and dist_ctx.enabled
    if distributed:
        parts = dist_utils.shard(parts, dist_ctx)
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
        if count == 0 and not distributed:
            continue
        optimizer.zero_grad(set_to_none=True)
        out = model(x, adj)
        if count == 0:  # keeps this rank in the gradient all-reduce, adds nothing
            loss = out.sum() * 0.0
        else:
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


def _find_unused(model: torch.nn.Module, data: Data, device) -> bool:
    """True when a forward/backward in eval mode (no dropout, no RNG drawn)
    on a small piece of the graph leaves some parameter without a gradient:
    then DDP needs ``find_unused_parameters``."""
    nodes = torch.arange(min(data.num_nodes, 64))
    part = induced_subgraph(data, nodes)
    x, adj = _graph_input(part, device)
    was_training = model.training
    model.eval()
    model.zero_grad(set_to_none=True)
    model(x, adj).float().sum().backward()
    unused = any(p.requires_grad and p.grad is None for p in model.parameters())
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return unused


def run(cfg: DictConfig) -> dict:
    """Train per ``cfg``, write ``config.yaml``, ``model.pt`` and
    ``metrics.json`` (each atomically) into ``cfg.out_dir``, and return the
    metrics: ``metric``, ``best_val``, ``test`` (at the best validation
    epoch), ``train``, ``best_epoch``, ``epochs``, ``seconds``,
    ``seconds_per_epoch``, ``num_params``, ``peak_memory_mb``, ``history``
    and, with ``train.diagnostics``, ``diagnostics``.

    With ``train.checkpoint_every=k`` the full training state goes to
    ``out_dir/checkpoint.pt`` every k epochs; ``train.resume=true`` continues
    from it (see :mod:`wavygraph.train.resume`). With ``train.distributed``
    (under torchrun) the ranks share the mini-batches and only rank 0
    evaluates and writes; the other ranks return ``{}``.
    """
    start = time.time()
    import_modules(cfg.get("imports", ()))  # plugins (a sweep worker starts without them)
    t = cfg.train
    device = resolve_device(t.device)
    if t.num_threads:
        torch.set_num_threads(t.num_threads)
    seed_everything(t.seed)
    d = cfg.data
    options = dataset_options(d)
    data, info = load_dataset(d.name, d.root, d.split, d.normalize_features, download=d.download,
                              split_mode=d.split_mode, per_class=d.per_class, num_val=d.num_val,
                              num_test=d.num_test, **options)
    ctx, device = dist_utils.setup(t, device)
    try:
        return _run(cfg, data, info, device, ctx, start)
    finally:
        dist_utils.teardown(ctx)


def dataset_options(d: DictConfig) -> dict:
    """The loader options of ``cfg.data``: ``data.csbm.*`` for ``csbm``, the
    file keys for ``file``, none for the other data sets."""
    name = d.name.lower()
    if name == "csbm":
        return dict(OmegaConf.to_container(d.csbm))
    if name == "file":
        return {k: d[k] for k in ("path", "features", "labels", "train_fraction", "val_fraction")}
    return {}


def _setup_model(cfg: DictConfig, data: Data, info: DatasetInfo, device, ctx):
    """The model to train (wrapped in DDP when distributed), the unwrapped
    model (evaluation, checkpoints) and the optimiser."""
    t = cfg.train
    model = build_model(cfg, info).to(device)
    core = model
    if ctx.enabled:
        unused = _find_unused(model, data, device)
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=unused
        )
        if ctx.rank > 0:  # distinct dropout masks per rank; rank 0 keeps the single-process stream
            torch.manual_seed(t.seed + 7919 * ctx.rank)
    optimizer = torch.optim.Adam(param_groups(core, t.weight_decay), lr=t.lr, weight_decay=t.weight_decay)
    return model, core, optimizer


def _run(cfg: DictConfig, data: Data, info: DatasetInfo, device, ctx, start: float) -> dict:
    """Set up (or restore from ``checkpoint.pt``), train, and finish on rank 0."""
    model, core, optimizer = _setup_model(cfg, data, info, device, ctx)
    generator = torch.Generator().manual_seed(cfg.train.seed)
    config = OmegaConf.to_container(cfg, resolve=True)
    out_dir = str(cfg.out_dir)
    state = restore(cfg.train, out_dir, config, core, optimizer, generator, ctx)
    if ctx.is_main:
        os.makedirs(out_dir, exist_ok=True)
        atomic_write_text(os.path.join(out_dir, "config.yaml"), to_yaml(cfg))

    def checkpoint() -> None:
        save_checkpoint(state, out_dir, config, core, optimizer, generator, ctx, dist_utils.gather)

    _train_epochs(cfg, model, core, optimizer, data, info, device, ctx, generator, state, checkpoint)
    if not ctx.is_main:
        return {}
    return _finish(cfg, core, data, info, device, ctx, state, config, start)


def _model_label(m: DictConfig) -> str:
    """The residual kind of a wavy model, else the baseline's ``arch``."""
    arch = m.get("arch", "wavy")
    return m.residual if arch == "wavy" else arch


def _train_epochs(cfg: DictConfig, model, core, optimizer, data: Data, info: DatasetInfo, device, ctx,
                  generator: torch.Generator, state: TrainState, checkpoint) -> None:
    """Epochs ``state.epoch + 1, ..., train.epochs`` (none when ``state``
    had stopped), until early stopping; ``state`` is updated in place and
    ``checkpoint()`` called every ``train.checkpoint_every`` epochs and at the end."""
    t = cfg.train
    eval_chunk = t.batch_size if t.eval_batch_size is None else t.eval_batch_size
    full_input = _graph_input(data, device) if not t.batch_size else None
    bar = tqdm(range(state.epoch + 1, t.epochs + 1), desc=f"{info.name} {_model_label(cfg.model)} L{cfg.model.num_layers}",
               disable=not t.progress or not ctx.is_main or state.stopped, file=sys.stderr, dynamic_ncols=True,
               initial=state.epoch, total=t.epochs)
    for epoch in ([] if state.stopped else bar):
        tick = time.time()
        loss = train_epoch(model, optimizer, data, info, t.batch_size, device, generator, full_input, ctx)
        state.epoch_seconds.append(time.time() - tick)
        state.epoch = epoch
        stop = False
        if not (epoch % t.eval_every and epoch != t.epochs):
            stop = _evaluate_epoch(cfg, core, data, info, device, ctx, state, loss, eval_chunk, bar)
        done = stop or epoch == t.epochs
        if t.checkpoint_every and (epoch % t.checkpoint_every == 0 or done):
            state.stopped = done
            checkpoint()
        if stop:
            break
    bar.close()


def _evaluate_epoch(cfg: DictConfig, core, data: Data, info: DatasetInfo, device, ctx, state: TrainState,
                    loss: float, eval_chunk, bar) -> bool:
    """Evaluate on rank 0 and record the scores in ``state``; returns whether
    to stop early (broadcast, so every rank agrees)."""
    stop = False
    if ctx.is_main:
        scores = evaluate(core, data, info, eval_chunk, device)
        state.history.append({"epoch": state.epoch, "loss": loss, **scores})
        state.observe(state.epoch, scores, core)
        bar.set_postfix(loss=f"{loss:.3f}", val=f"{scores['val']:.4f}", best_val=f"{state.best['val']:.4f}",
                        test=f"{state.best['test']:.4f}")
        stop = bool(cfg.train.patience and state.since_best >= cfg.train.patience)
    return dist_utils.broadcast_flag(stop, ctx, device)


def _diagnostics(cfg: DictConfig, core, data: Data, device) -> dict | None:
    """The per-layer diagnostics of ``core`` (``train.diagnostics``; none for
    the baselines), or ``None``; a failing measure only warns."""
    if not (cfg.train.diagnostics and layer_diagnostics is not None and isinstance(core, WavyDIFFormer)):
        return None
    core.eval()
    diag_data = Data(x=data.x, edge_index=data.edge_index, y=data.y, num_nodes=data.num_nodes).to(device)
    try:
        with torch.no_grad():
            diag = layer_diagnostics(core, diag_data)
    except Exception as exc:  # a failing measure must not lose the trained run
        print(f"wavygraph: warning: diagnostics failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    return {k: [float(v) for v in vals] for k, vals in diag.items()}


def _finish(cfg: DictConfig, core, data: Data, info: DatasetInfo, device, ctx, state: TrainState, config: dict,
            start: float) -> dict:
    """Load the best weights into ``core``, write ``model.pt`` and
    ``metrics.json``; returns the metrics."""
    out_dir = str(cfg.out_dir)
    best = state.best
    core.load_state_dict(state.best_state)
    metrics = {
        "dataset": info.name,
        "metric": info.metric,
        "num_tasks": info.num_outputs if info.task == "multilabel" else 1,  # OGB's count: proteins 112, arxiv 1
        "evaluator": info.ogb_name,  # the OGB Evaluator that scored the run, or None
        "best_val": best["val"],
        "test": best["test"],
        "train": best["train"],
        "best_epoch": best["epoch"],
        "epochs": state.epoch,
        "seconds": None,
        "seconds_per_epoch": float(np.mean(state.epoch_seconds)) if state.epoch_seconds else None,
        "num_params": sum(p.numel() for p in core.parameters()),
        "peak_memory_mb": None,
        "arch": cfg.model.get("arch", "wavy"),
        "residual": cfg.model.residual if cfg.model.get("arch", "wavy") == "wavy" else None,  # none for a baseline
        "num_layers": cfg.model.num_layers,
        "world_size": ctx.world_size,
        "history": state.history,
    }
    diagnostics = _diagnostics(cfg, core, data, device)
    if diagnostics is not None:
        metrics["diagnostics"] = diagnostics
    checkpoint = {
        "state_dict": state.best_state,
        "config": config,
        "info": {k: v for k, v in asdict(info).items() if k != "extra"},
        "epoch": best["epoch"],
        "best_val": best["val"],
    }
    atomic_torch_save(checkpoint, os.path.join(out_dir, "model.pt"))
    metrics["peak_memory_mb"] = peak_memory_mb(device)
    metrics["seconds"] = time.time() - start
    atomic_write_json(os.path.join(out_dir, "metrics.json"), metrics)
    return metrics
