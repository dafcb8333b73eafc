"""Peak memory and seconds per training epoch against depth, for the three
ways a deep full-batch stack can train:

- ``plain``: every layer keeps what its backward needs (``--residual``,
  default ``light_wave``);
- ``checkpointed``: the same model with ``model.gradient_checkpointing=true``
  (segments of layers recomputed in backward; same scores);
- ``reversible``: ``model.residual=leapfrog model.reversible=true`` (the
  inputs rebuilt by inverting the steps; no layer state stored).

Every cell is one ``wavygraph train`` run of ``--config`` (default: the
ogbn-arxiv stand-in, 169,343 nodes, hidden 256, full batch) with
``model.num_layers`` and the mode's switches, ``train.diagnostics=false``;
``peak_memory_mb`` and ``seconds_per_epoch`` come from its ``metrics.json``.
On CPU each cell runs in its own process (the peak resident set size only
grows, so cells cannot share one), and the peak is the whole process's
(data set, training, the evaluation pass). On CUDA the cells run in this
process, each after ``torch.cuda.reset_peak_memory_stats``, and the peak is
``torch.cuda.max_memory_allocated``. ``time / plain`` divides a cell's
seconds per epoch by the plain model's at the same depth; the rows are
printed as the cells finish, depth by depth. A cell whose
estimated peak exceeds ``--max-gb`` is skipped (the estimate extrapolates the
mode's measured cells linearly in depth; before two are measured it assumes
about 3 (plain), 1.5 (checkpointed) or 0.5 (reversible) ``N x hidden``
float32 tensors per layer).

    python -m benchmarks.bench_depth_memory --layers 7 64 --threads 2 --max-gb 18
    python -m benchmarks.bench_depth_memory --nodes 5000 --modes reversible --layers 1000 --epochs 5
    python -m benchmarks.bench_depth_memory --device cuda --layers 7 16 32 64 --reversible-layers 256 1000 --plot d.png
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile

import torch

from benchmarks._common import machine_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = {
    "plain": lambda residual: [f"model.residual={residual}"],
    "checkpointed": lambda residual: [f"model.residual={residual}", "model.gradient_checkpointing=true"],
    "reversible": lambda residual: ["model.residual=leapfrog", "model.reversible=true"],
}
PRIOR_STATES_PER_LAYER = {"plain": 3.0, "checkpointed": 1.5, "reversible": 0.5}  # N x hidden float32 tensors
BASE_STATES = 12.0  # data set, embedding, evaluation pass: about this many N x hidden tensors


def cell_overrides(args, mode: str, layers: int, out_dir: str) -> list[str]:
    over = MODES[mode](args.residual) + [
        f"model.num_layers={layers}", f"train.epochs={args.epochs}", "train.diagnostics=false",
        "train.progress=false", f"train.device={args.device}", f"out_dir={out_dir}",
    ]
    if args.threads:
        over.append(f"train.num_threads={args.threads}")
    if args.nodes:
        over.append(f"data.csbm.num_nodes={args.nodes}")
    return over + list(args.set)


def run_cell(args, mode: str, layers: int, out_dir: str) -> dict:
    """``metrics.json`` of one cell, or ``{"error": ...}``."""
    over = cell_overrides(args, mode, layers, out_dir)
    if args.device.startswith("cuda"):
        from wavygraph.config import load_config
        from wavygraph.train import run

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            return run(load_config(args.config, over))
        except torch.cuda.OutOfMemoryError:
            return {"error": "out of memory"}
        finally:
            gc.collect()
            torch.cuda.empty_cache()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "wavygraph", "train", args.config, *over]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {args.timeout} s"}
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": tail[:200]}
    with open(os.path.join(out_dir, "metrics.json")) as f:
        return json.load(f)


def estimate_mb(mode: str, layers: int, measured: list, state_mb: float) -> float:
    """Estimated peak MB of ``mode`` at ``layers``: a line through the mode's
    last two measured ``(layers, peak)`` cells; from one, the prior slope."""
    pts = sorted(measured)
    if len(pts) >= 2:
        (l0, p0), (l1, p1) = pts[-2], pts[-1]
        slope = max((p1 - p0) / (l1 - l0), 0.0)
        return p1 + slope * (layers - l1)
    if pts:
        l0, p0 = pts[-1]
        return p0 + state_mb * PRIOR_STATES_PER_LAYER[mode] * max(layers - l0, 0)
    return state_mb * (BASE_STATES + PRIOR_STATES_PER_LAYER[mode] * layers)


def fmt_loss(history: list) -> str:
    losses = [h["loss"] for h in history if "loss" in h]
    return f"{losses[0]:.4f} -> {losses[-1]:.4f}" if len(losses) > 1 else (f"{losses[0]:.4f}" if losses else "-")


def table_row(row: dict, plain_sec: dict) -> str:
    if "skip" in row:
        return f"| {row['mode']} | {row['layers']} | {row['skip']} | - | - | - |"
    ratio = f"{row['sec'] / plain_sec[row['layers']]:.2f}x" if row["layers"] in plain_sec else "-"
    return f"| {row['mode']} | {row['layers']} | {row['peak']:,.0f} | {row['sec']:.4g} | {ratio} | {row['loss']} |"


def run_all(args, state_mb: float) -> list[dict]:
    """Every cell, depth by depth (the modes of one depth back to back, so
    that their time ratio sees the same load); each row printed when done."""
    rows, measured, plain_sec = [], {m: [] for m in args.modes}, {}
    cells = [(mode, layers) for layers in sorted(set(args.layers + args.reversible_layers)) for mode in args.modes
             if layers in args.layers or mode == "reversible"]
    print("| mode | layers | peak MB | s/epoch | time / plain | loss (first -> last epoch) |")
    print("|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_depth_memory_") as tmp:  # the cells' run folders
        for mode, layers in cells:
            row = {"mode": mode, "layers": layers}
            need = estimate_mb(mode, layers, measured[mode], state_mb)
            if need > args.max_gb * 1024:
                row["skip"] = f"skipped: would need ~{need / 1024:.1f} GB"
            else:
                m = run_cell(args, mode, layers, os.path.join(tmp, f"{mode}_{layers}"))
                if "error" in m:
                    row["skip"] = f"failed: {m['error']}"
                else:
                    row.update(peak=m["peak_memory_mb"], sec=m["seconds_per_epoch"], loss=fmt_loss(m["history"]))
                    measured[mode].append((layers, m["peak_memory_mb"]))
                    if mode == "plain":
                        plain_sec[layers] = row["sec"]
            rows.append(row)
            print(table_row(row, plain_sec), flush=True)
    return rows


def plot(rows: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for mode in dict.fromkeys(r["mode"] for r in rows):
        pts = [(r["layers"], r["peak"], r["sec"]) for r in rows if r["mode"] == mode and "peak" in r]
        if not pts:
            continue
        layers, peak, sec = zip(*pts)
        axes[0].plot(layers, [p / 1024 for p in peak], "o-", label=mode)
        axes[1].plot(layers, sec, "o-", label=mode)
    for ax, label in zip(axes, ("peak memory (GB)", "seconds per epoch")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("layers")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"# wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/arxiv_standin.yaml")
    ap.add_argument("--nodes", type=int, default=None, help="data.csbm.num_nodes (default: the preset's 169,343)")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--layers", type=int, nargs="+", default=[7, 16, 32, 64], help="depths of every mode")
    ap.add_argument("--reversible-layers", type=int, nargs="*", default=[256, 1000],
                    help="further depths of the reversible mode only")
    ap.add_argument("--residual", default="light_wave", help="kind of the plain and checkpointed models")
    ap.add_argument("--hidden", type=int, default=None, help="model.hidden_channels (default: the config's)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=None, help="train.num_threads of every cell")
    ap.add_argument("--max-gb", type=float, default=None,
                    help="skip cells estimated above this (default: the GPU's memory, or 3/4 of the RAM)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds a CPU cell may run")
    ap.add_argument("--set", nargs="*", default=[], help="further key=value overrides of every cell")
    ap.add_argument("--plot", default=None, help="write peak memory and seconds against depth to this PNG")
    args = ap.parse_args()
    if args.hidden:
        args.set = [f"model.hidden_channels={args.hidden}", *args.set]
    if args.max_gb is None:
        total = (torch.cuda.get_device_properties(0).total_memory if args.device == "cuda"
                 else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 / 4)
        args.max_gb = total / 2**30
    nodes = args.nodes or 169_343
    hidden = args.hidden or 256
    state_mb = nodes * hidden * 4 / 2**20
    cmd = "python -m benchmarks.bench_depth_memory " + " ".join(sys.argv[1:])
    title = (f"{args.config} N={nodes:,} hidden {hidden}, {args.epochs} epoch(s), {args.device}; "
             f"plain/checkpointed: {args.residual}, reversible: leapfrog")
    print(f"# {cmd}\n# {title}; {machine_line(args.device)}; skip above {args.max_gb:.1f} GB")
    rows = run_all(args, state_mb)
    if args.plot:
        plot(rows, args.plot, title)


if __name__ == "__main__":
    main()
