"""Training of :class:`~wavygraph.nn.WavyDIFFormer` (or a baseline) on one
node-prediction data set: :func:`run` and its epoch loop.

Training is full-batch, or DIFFormer's random-partition mini-batches when
``train.batch_size`` is set: every epoch a random permutation of the nodes
is cut into chunks of ``batch_size`` and the model sees each chunk's induced
subgraph (nodes relabelled in the chunk's order), one optimiser step per
chunk, the loss on the chunk's training nodes. Evaluation covers every node
(:mod:`.evaluation`).

The reported test score is the one at the epoch of the best validation
score (early model selection); that epoch's weights are the checkpoint.

The levels: :mod:`.env` (seeds, device, threads, memory), :mod:`.run_state`
(the run's state and its set-up), this module (the epochs),
:mod:`.evaluation` (loss and scores), :mod:`.outputs` (the files) and
:mod:`.diagnose` (the per-layer diagnostics).
"""
from __future__ import annotations

import math
import os
import sys
import time
from typing import Callable

from omegaconf import DictConfig
from tqdm.auto import tqdm

from wavygraph.config import ConfigError, model_label
from wavygraph.data import DatasetInfo, induced_subgraph, random_partition

from . import distributed as dist_utils
from .evaluation import evaluate, graph_input, loss_fn
from .outputs import finish, write_config
from .resume import save_checkpoint
from .run_folder import RunFolder, plan, publishing
from .run_state import TrainingRun, load_data, prepare, prepare_process


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite at ``epoch``: training stops
    there. ``best_epoch`` is the epoch of the best validation score so far
    (0: none, the initial weights), whose weights :func:`run` has written to
    ``model.pt`` (with ``metrics.json``) before raising. The message says
    what to try."""

    def __init__(self, epoch: int, loss: float, best_epoch: int = 0, lr: float | None = None):
        self.epoch, self.loss, self.best_epoch, self.lr = epoch, loss, best_epoch, lr
        kept = f"the best epoch so far ({best_epoch})" if best_epoch else "no evaluated epoch (the initial weights)"
        now = f" (now {lr:g})" if lr is not None else ""
        super().__init__(f"the training loss became {loss} at epoch {epoch}; training stopped there, model.pt "
                         f"holds {kept}; try a lower train.lr{now}, a smaller model.tau or fewer model.num_layers")


#: ``on_eval(epoch, scores, best)``: called after every evaluation (rank 0)
#: with that epoch's scores and the best-so-far ``{"val", "test", "train",
#: "epoch"}``; an exception it raises stops the run and leaves :func:`run`.
EvalCallback = Callable[[int, dict, dict], None]


def run(cfg: DictConfig, overwrite: bool = False, on_eval: EvalCallback | None = None) -> dict:
    """Train per ``cfg`` and publish the run as ``cfg.out_dir``: its
    ``config.yaml``, ``model.pt`` and ``metrics.json`` (each written
    atomically) are written into a work folder beside it and renamed into
    place when the run ends, so that ``out_dir`` is complete or untouched
    (:mod:`wavygraph.train.run_folder`). An ``out_dir`` that holds a run is
    refused before anything is written, unless ``overwrite`` (it is replaced
    when this run ends) or ``train.resume`` with its checkpoint. A loss that
    becomes NaN or infinite stops the run: the folder is published with the
    best epoch so far and :class:`NonFiniteLossError` is raised. Returns the
    metrics: ``metric``, ``best_val``, ``test`` (at the best validation
    epoch), ``train``, ``best_epoch``, ``epochs``, ``seconds``,
    ``seconds_per_epoch``, ``num_params``, ``peak_memory_mb``, ``history``
    and, with ``train.diagnostics``, ``diagnostics``.

    With ``train.checkpoint_every=k`` the full training state goes to
    ``checkpoint.pt`` every k epochs (in the work folder while the run
    lasts, where an interrupted run keeps it); ``train.resume=true``
    continues from it (see :mod:`wavygraph.train.resume`). With
    ``train.distributed`` (under torchrun) the ranks share the mini-batches
    and only rank 0 evaluates and writes; the other ranks return ``{}``. ``on_eval`` (see
    :data:`EvalCallback`) sees every evaluation, e.g. to prune a tuning trial.
    """
    distributed = bool(cfg.train.get("distributed", False))
    is_main = not distributed or os.environ.get("RANK", "0") == "0"
    return _run(cfg, plan(cfg, overwrite, check_lock=is_main), on_eval)


def run_in_place(cfg: DictConfig, on_eval: EvalCallback | None = None) -> dict:
    """:func:`run` writing straight into ``cfg.out_dir``, without its checks
    and work folder: for a caller that publishes the folder itself (a sweep
    cell's temporary folder)."""
    return _run(cfg, None, on_eval)


def _run(cfg: DictConfig, folder: RunFolder | None, on_eval: EvalCallback | None = None) -> dict:
    start = time.time()
    device = prepare_process(cfg)
    data, info = load_data(cfg.data)
    ctx, device = dist_utils.setup(cfg.train, device)
    try:
        # the run's state (its DDP model among it) lives in _train_and_publish's frame only, so it is
        # freed before teardown destroys the process group (see distributed.teardown)
        return _train_and_publish(cfg, data, info, device, ctx, start, folder, on_eval)
    finally:
        dist_utils.teardown(ctx)


def _train_and_publish(cfg: DictConfig, data, info: DatasetInfo, device, ctx, start: float,
                       folder: RunFolder | None, on_eval: EvalCallback | None) -> dict:
    job = _prepare_in_memory(cfg, data, info, device, ctx, start, folder)
    diverged = None
    with publishing(folder, ctx.is_main):
        write_config(job)
        try:
            train_epochs(job, on_eval)
        except NonFiniteLossError as exc:  # keep what the run has as best, then report the divergence
            diverged = exc
        metrics = finish(job) if ctx.is_main else {}
    if diverged is not None:
        raise diverged
    return metrics


def _prepare_in_memory(cfg: DictConfig, data, info: DatasetInfo, device, ctx, start: float,
                       folder: RunFolder | None) -> TrainingRun:
    """:func:`prepare`; a model too large to allocate (e.g. ``model.hidden_channels=10**8``) is a one-line
    :class:`ConfigError`, raised before anything is written."""
    try:
        return prepare(cfg, data, info, device, ctx, start, folder)
    except RuntimeError as exc:  # torch.OutOfMemoryError (CUDA) is one; the CPU allocator raises a plain one
        if "out of memory" not in str(exc) and "allocate" not in str(exc):
            raise
        m = cfg.model
        raise ConfigError(f"the model does not fit in memory on {device} ({info.num_features} features, "
                          f"{info.num_outputs} outputs); lower model.hidden_channels (now {m.hidden_channels}) "
                          f"or model.num_layers (now {m.num_layers})") from None


def train_epoch(job: TrainingRun, full_input=None) -> float:
    """One epoch of ``job.model`` (chunks of ``train.batch_size`` drawn
    from ``job.generator``); returns the mean training loss (of this rank's
    chunks). ``full_input``: the whole graph's ``(x, adj)``, built once for a
    full-batch run. Distributed, the rank takes its share of the chunks
    (see :mod:`wavygraph.train.distributed`) and steps even on a chunk
    without training nodes, so that every rank joins every all-reduce."""
    model, optimizer, data, info, device = job.model, job.optimizer, job.data, job.info, job.device
    batch_size = job.cfg.train.batch_size
    model.train()
    if not batch_size or batch_size >= data.num_nodes:
        parts = [None]
    else:
        parts = random_partition(data.num_nodes, batch_size, job.generator)
    distributed = job.ctx.enabled
    if distributed:
        parts = dist_utils.chunks_of_rank(parts, job.ctx)
    losses, weights = [], []
    for nodes in parts:
        if nodes is None:
            part = data
            x, adj = full_input if full_input is not None else graph_input(data, device)
        else:
            part = induced_subgraph(data, nodes)
            x, adj = graph_input(part, device)
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


def progress_bar(job: TrainingRun) -> tqdm:
    """The epochs still to run under a tqdm bar on stderr (``train.progress``,
    rank 0, not for a run that had stopped)."""
    t, state = job.cfg.train, job.state
    return tqdm(range(state.epoch + 1, t.epochs + 1),
                desc=f"{job.info.name} {model_label(job.cfg.model)} L{job.cfg.model.num_layers}",
                disable=not t.progress or not job.ctx.is_main or state.stopped, file=sys.stderr,
                dynamic_ncols=True, initial=state.epoch, total=t.epochs)


def train_epochs(job: TrainingRun, on_eval: EvalCallback | None = None) -> None:
    """Epochs ``state.epoch + 1, ..., train.epochs`` (none when the state
    had stopped), until early stopping; ``job.state`` is updated in place and
    a checkpoint written every ``train.checkpoint_every`` epochs and at the end;
    ``on_eval`` is called after each evaluation."""
    t, state = job.cfg.train, job.state
    full_input = graph_input(job.data, job.device) if not t.batch_size else None
    bar = progress_bar(job)
    for epoch in ([] if state.stopped else bar):
        tick = time.time()
        loss = train_epoch(job, full_input)
        state.epoch_seconds.append(time.time() - tick)
        if dist_utils.broadcast_flag(not math.isfinite(loss), job.ctx, job.device):
            bar.close()
            raise NonFiniteLossError(epoch, loss, state.best["epoch"], t.lr)
        state.epoch = epoch
        stop = False
        if not (epoch % t.eval_every and epoch != t.epochs):
            stop = evaluate_epoch(job, loss, bar)
            if on_eval is not None and job.ctx.is_main:
                on_eval(epoch, state.history[-1], dict(state.best))
        done = stop or epoch == t.epochs
        if t.checkpoint_every and (epoch % t.checkpoint_every == 0 or done):
            state.stopped = done
            save_checkpoint(job)  # every rank: the RNG states are gathered
        if stop:
            break
    bar.close()


def evaluate_epoch(job: TrainingRun, loss: float, bar: tqdm) -> bool:
    """Evaluate on rank 0 and record the scores in ``job.state``; returns
    whether to stop early (broadcast, so every rank agrees)."""
    t, state = job.cfg.train, job.state
    stop = False
    if job.ctx.is_main:
        eval_chunk = t.batch_size if t.eval_batch_size is None else t.eval_batch_size
        scores = evaluate(job.core, job.data, job.info, eval_chunk, job.device)
        state.history.append({"epoch": state.epoch, "loss": loss, **scores})
        state.observe(state.epoch, scores, job.core)
        bar.set_postfix(loss=f"{loss:.3f}", val=f"{scores['val']:.4f}", best_val=f"{state.best['val']:.4f}",
                        test=f"{state.best['test']:.4f}")
        stop = bool(t.patience and state.since_best >= t.patience)
    return dist_utils.broadcast_flag(stop, job.ctx, job.device)
