"""Forward + backward of one attention module: wavygraph's DIFFormerConv
(graph branch off) against PyG's SGFormerAttention and PolynormerAttention
with equal channels and heads.

Times: same process, the modules called in turn, median of ``--reps``.
Peak memory: on CPU one call in a fresh subprocess per module (process peak
RSS above the baseline); on CUDA ``torch.cuda.max_memory_allocated`` above
the baseline, in this process.

    python -m benchmarks.bench_attention --sizes 169343 --channels 64 --heads 1
    python -m benchmarks.bench_attention            # the full grid (slow on CPU)
"""
from __future__ import annotations

import argparse
import json
import math

import torch

from benchmarks._common import fmt_mb, in_subprocess, machine_line, measure_peak, time_alternating, warm_peak

SIZES = [10_000, 50_000, 169_343, 500_000, 1_000_000]
IMPLS = ("wavygraph", "sgformer", "polynormer")


def build(impl: str, channels: int, heads: int, device: str):
    from torch_geometric.nn.attention import PolynormerAttention, SGFormerAttention

    from wavygraph.nn import DIFFormerConv

    if impl == "wavygraph":
        mod = DIFFormerConv(channels, heads=heads, use_graph=False)
        return mod.to(device), lambda m, x: m(x)
    if impl == "sgformer":
        mod = SGFormerAttention(channels, heads=heads, head_channels=channels)
    else:
        mod = PolynormerAttention(channels, heads=heads, head_channels=channels)
    return mod.to(device), lambda m, x: m(x.unsqueeze(0)).squeeze(0)  # (1, N, C)


def make_step(impl, n, channels, heads, device, amp):
    torch.manual_seed(0)
    mod, call = build(impl, channels, heads, device)
    x = torch.randn(n, channels, device=device, requires_grad=True)  # a middle layer: x needs grad

    def step():
        mod.zero_grad(set_to_none=True)
        x.grad = None
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=amp):
            out = call(mod, x)
        out.float().square().mean().backward()

    return step


def child(args) -> None:
    # a small call first: library start-up (thread pools, kernels) is not the module's memory
    make_step(args.impl, 1024, args.channels, args.heads, args.device, args.amp)()
    step = make_step(args.impl, args.n, args.channels, args.heads, args.device, args.amp)
    print(json.dumps({"peak": measure_peak(step, args.device)}))


def fit_slope(points: dict) -> float:
    """Least-squares slope of log(time) against log(N)."""
    pts = [(math.log(n), math.log(t)) for n, t in points.items()]
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    return sum((a - mx) * (b - my) for a, b in pts) / sum((a - mx) ** 2 for a, _ in pts)


def run_slope(args) -> None:
    for c in args.channels:
        for h in args.heads:
            fns = {n: make_step("wavygraph", n, c, h, args.device, args.amp) for n in args.sizes}
            times = time_alternating(fns, args.reps, args.device)
            print("| N | C | H | wavygraph s | s per 1M nodes |")
            print("|---|---|---|---|---|")
            for n, t in times.items():
                print(f"| {n} | {c} | {h} | {t:.3f} | {t * 1e6 / n:.3f} |")
            pts = {n: t for n, t in times.items() if n >= 50_000}
            if len(pts) >= 2:
                print(f"wavygraph log-log slope of time vs N (C={c}, H={h}, N={min(pts)}..{max(pts)}, "
                      f"sizes timed in turn): {fit_slope(pts):.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    ap.add_argument("--channels", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--heads", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    ap.add_argument("--peer-max-n", type=int, default=None, help="run the peers only up to this N")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", action="store_true", help="bf16 autocast")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--slope", action="store_true",
                    help="wavygraph only: time all sizes in turn (alternating across N, so load hits every "
                         "size alike) and print the fitted log-log slope of time vs N for N >= 50k")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        args.channels, args.heads = args.channels[0], args.heads[0]
        return child(args)

    print(f"# bench_attention: forward + backward, {machine_line(args.device)}, device {args.device}"
          f"{', bf16 autocast' if args.amp else ''}, median of {args.reps}")
    if args.slope:
        return run_slope(args)
    head = "| N | C | H | " + " | ".join(f"{i} s" for i in args.impls)
    head += " | " + " | ".join(f"{i} MB" for i in args.impls)
    peers = [i for i in args.impls if i != "wavygraph"]
    head += "".join(f" | {p}/wavygraph time | {p}/wavygraph mem" for p in peers) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    ours_times = {}
    for c in args.channels:
        for h in args.heads:
            for n in args.sizes:
                impls = [i for i in args.impls if i == "wavygraph" or args.peer_max_n is None or n <= args.peer_max_n]
                fns = {i: make_step(i, n, c, h, args.device, args.amp) for i in impls}
                times = time_alternating(fns, args.reps, args.device)
                del fns
                mem = {}
                if not args.no_memory:
                    for i in impls:
                        if args.device.startswith("cuda"):  # the allocator's own peak: exact in this process
                            mem[i] = warm_peak(make_step(i, n, c, h, args.device, args.amp), args.device)
                            continue
                        extra = ["--amp"] if args.amp else []
                        if args.threads:
                            extra += ["--threads", str(args.threads)]
                        mem[i] = in_subprocess("benchmarks.bench_attention", [
                            "--child", "--impl", i, "--n", str(n), "--channels", str(c), "--heads", str(h),
                            "--device", args.device, *extra])["peak"]
                if "wavygraph" in times:
                    ours_times[(c, h, n)] = times["wavygraph"]
                row = f"| {n} | {c} | {h} | "
                row += " | ".join(f"{times[i]:.4g}" if i in times else "-" for i in args.impls)
                row += " | " + " | ".join(fmt_mb(mem[i]) if i in mem else "-" for i in args.impls) + " |"
                for p in peers:
                    t = f"{times[p] / times['wavygraph']:.2f}x" if p in times and "wavygraph" in times else "-"
                    m = f"{mem[p] / mem['wavygraph']:.2f}x" if p in mem and "wavygraph" in mem else "-"
                    row += f" {t} | {m} |"
                print(row, flush=True)
    # fitted log-log slope of wavygraph's time vs N (N >= 50k)
    for c in args.channels:
        for h in args.heads:
            pts = {n: t for (cc, hh, n), t in ours_times.items() if cc == c and hh == h and n >= 50_000}
            if len(pts) >= 2:
                print(f"wavygraph log-log slope of time vs N (C={c}, H={h}, N={min(pts)}..{max(pts)}): "
                      f"{fit_slope(pts):.3f}")

if __name__ == "__main__":
    main()
