"""The per-layer over-smoothing diagnostics of a trained run
(``train.diagnostics``; the measures: :mod:`wavygraph.diagnostics`)."""
from __future__ import annotations

import sys

import torch
from torch_geometric.data import Data

from wavygraph.diagnostics import layer_diagnostics
from wavygraph.nn import WavyDIFFormer

from .run_state import TrainingRun


def run_diagnostics(job: TrainingRun) -> dict | None:
    """``{measure: [value per layer]}`` of ``job.core`` on the whole graph
    (``train.diagnostics``; none for the baselines), or ``None``; a failing
    measure only warns, so that the trained run is kept."""
    core = job.core
    if not (job.cfg.train.diagnostics and isinstance(core, WavyDIFFormer)):
        return None
    core.eval()
    data = job.data
    diag_data = Data(x=data.x, edge_index=data.edge_index, y=data.y, num_nodes=data.num_nodes).to(job.device)
    try:
        with torch.no_grad():
            diag = layer_diagnostics(core, diag_data)
    except Exception as exc:  # a failing measure must not lose the trained run
        print(f"wavygraph: warning: diagnostics failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    return {k: [float(v) for v in vals] for k, vals in diag.items()}
