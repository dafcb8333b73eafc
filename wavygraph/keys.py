"""Config keys that do not change a run's result: one table,
:data:`NEUTRAL_KEYS`, read by the sweep's cell hash
(:func:`wavygraph.sweep.spec.cell_hash`, through :func:`hash_ignores`) and by
the config check of ``train.resume`` (:func:`wavygraph.train.resume.config_diff`,
through :func:`resume_ignores`).

Each key names what it changes instead of the result:

* :data:`NOTHING`: none of the run's numbers (where files go, logging,
  checkpoint writing; gradient checkpointing recomputes the same numbers,
  tested equal). Left out of a cell's hash; a checkpoint resumes under any value.
* :data:`ROUNDING`: only the rounding of float sums (the device, the thread
  count, the collective backend, the compiled step). Left out of a cell's
  hash; a resumed run keeps the value, so that it ends with the same numbers
  as an uninterrupted one (``train.device`` is kept where both values name the
  same device).
* :data:`OUTPUTS`: only what is written beside the scores (the per-layer
  diagnostics). A cell of its own; a checkpoint's training state carries over.
* :class:`Added` ``(value)``: an option added to the config after results
  existed, which reproduces the behaviour from before it while it holds
  ``value``. At that value it is left out of a cell's hash, and a checkpoint
  written before the option resumes, so finished cells and checkpoints stay
  valid.

Every new config key belongs in :data:`NEUTRAL_KEYS` unless it changes the
result at every value of its own.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from wavygraph.utils import flatten

NOTHING = "nothing"
ROUNDING = "rounding"
OUTPUTS = "outputs"
#: A key absent from a config (one written before the key existed).
MISSING = "<unset>"


@dataclass(frozen=True)
class Added:
    """An option added to the config later; ``value`` gives the behaviour from before it."""

    value: Any


#: Dotted config key -> what it changes instead of the result (see the module's docstring).
NEUTRAL_KEYS: dict[str, Any] = {
    "out_dir": NOTHING, "data.root": NOTHING, "train.progress": NOTHING, "train.checkpoint_every": NOTHING,
    "train.resume": NOTHING, "train.cpu_heap": NOTHING, "model.gradient_checkpointing": NOTHING,
    "model.checkpoint_segments": NOTHING,
    "train.device": ROUNDING, "train.num_threads": ROUNDING, "train.dist_backend": ROUNDING,
    "model.step_impl": ROUNDING,
    "train.diagnostics": OUTPUTS,
    "train.distributed": Added(False),
    "model.arch": Added("wavy"), "model.gcnii_alpha": Added(0.1), "model.gcnii_theta": Added(0.5),
    "model.gcnii_shared_weights": Added(True), "model.gcnii_conv_weight_decay": Added(0.01),
    "model.sgformer_trans_layers": Added(1), "model.sgformer_trans_dropout": Added(0.2),
    "model.sgformer_graph_weight": Added(0.8), "model.sgformer_trans_weight_decay": Added(0.001),
    "model.input_dropout": Added(0.0), "model.source_weight": Added(1.0), "model.shared_attention": Added(False),
    "data.split_mode": Added("given"), "data.per_class": Added(20), "data.num_val": Added(500),
    "data.num_test": Added(1000), "data.path": Added(None), "data.features": Added(None),
    "data.labels": Added(None), "data.train_fraction": Added(0.6), "data.val_fraction": Added(0.2),
    "model.reversible": Added(False), "model.local": Added("gcn"),
    "model.readout": Added("last"), "model.tau_layers": Added(None), "model.identity_map": Added(None),
}


def hash_ignores(key: str, value: Any) -> bool:
    """Whether a sweep cell's hash leaves out ``key`` holding ``value``."""
    kind = NEUTRAL_KEYS.get(key)
    if isinstance(kind, Added):
        return value == kind.value
    return kind in (NOTHING, ROUNDING)


def resume_ignores(key: str, saved: Any, current: Any) -> bool:
    """Whether a checkpoint written with ``key=saved`` may be resumed with
    ``key=current`` although they differ (:data:`MISSING`: the key is absent)."""
    kind = NEUTRAL_KEYS.get(key)
    if isinstance(kind, Added):
        return saved == MISSING and current == kind.value
    return kind in (NOTHING, OUTPUTS)


def _drop(tree: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    for p in parents:
        tree = tree.get(p)
        if not isinstance(tree, dict):
            return
    tree.pop(last, None)


def hashed_config(config: dict) -> dict:
    """The part of a resolved config (a plain container) that a cell's hash
    covers, as a new tree: without the keys that do not change its result
    (:func:`wavygraph.keys.hash_ignores`)."""
    tree = json.loads(json.dumps(config))  # deep copy
    flat = flatten(tree)
    for key in NEUTRAL_KEYS:
        if hash_ignores(key, flat.get(key, MISSING)):
            _drop(tree, key)
    return tree
