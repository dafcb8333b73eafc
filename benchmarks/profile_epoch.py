"""Where a residual kind's extra epoch time goes: torch.profiler over
training epochs of bench_epoch's models, the ops whose self time (device
time on CUDA) differs most from diffusion's, plus plain timings of variants.

    python -m benchmarks.profile_epoch --device cuda
    python -m benchmarks.profile_epoch --residuals diffusion light_wave --threads 1
"""
from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks._common import machine_line, sync, time_alternating
from benchmarks.bench_epoch import build, load_graph
from wavygraph.nn.steppers import STEPPERS
from wavygraph.nn.steppers.compiled import STEP_IMPLS


def self_times(epoch, device: str, reps: int) -> dict:
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        for _ in range(reps):
            epoch()
        sync(device)
    attr = "self_device_time_total" if device.startswith("cuda") else "self_cpu_time_total"
    return {e.key: (getattr(e, attr, 0) or 0) / reps / 1e3 for e in prof.key_averages()}  # ms per epoch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--residuals", nargs="+", default=["diffusion", "light_wave", "wave"], choices=list(STEPPERS))
    ap.add_argument("--layers", type=int, default=7)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--num-nodes", type=int, default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--step-impl", default="eager", choices=STEP_IMPLS, help="WavyDIFFormer's step_impl")
    ap.add_argument("--no-timing", action="store_true", help="only the profile, no plain timings")
    args = ap.parse_args()
    args.compile = False
    if args.threads:
        torch.set_num_threads(args.threads)
    data = load_graph(args.num_nodes, args.device)
    print(f"# profile_epoch: {machine_line(args.device)}, device {args.device}, {args.layers} layers, "
          f"hidden {args.hidden}, dropout {args.dropout}, step_impl {args.step_impl}, "
          f"ms per epoch over {args.reps} epochs")
    epochs = {r: build(r, data, args, args.step_impl) for r in args.residuals}
    for r in args.residuals:  # the joint light-wave step as the unfused composition, for comparison
        if r == "light_wave_joint" and args.step_impl == "eager" and not args.no_timing:
            from wavygraph.nn import JointLightWaveStepper

            fused_fn = JointLightWaveStepper._fused
            plain = build(r, data, args, args.step_impl)

            def composed(plain=plain):
                JointLightWaveStepper._fused = lambda self, state, force, norm: norm(*self(state, force))
                try:
                    plain()
                finally:
                    JointLightWaveStepper._fused = fused_fn

            epochs["light_wave_joint (unfused step)"] = composed
    if args.no_timing:
        for fn in epochs.values():  # warm-up (compiles, Adam state)
            fn()
    else:
        times = time_alternating(epochs, max(args.reps, 5), args.device, warmup=2)
        for name, t in times.items():
            print(f"# {name}: {1e3 * t:.2f} ms/epoch ({100 * (t / times[args.residuals[0]] - 1):+.1f}% vs {args.residuals[0]})")
    base = args.residuals[0]
    prof = {r: self_times(epochs[r], args.device, args.reps) for r in args.residuals}
    for r in args.residuals[1:]:
        keys = set(prof[base]) | set(prof[r])
        delta = {k: prof[r].get(k, 0.0) - prof[base].get(k, 0.0) for k in keys}
        total = sum(prof[r].values()) - sum(prof[base].values())
        print(f"## {r} - {base}: {total:+.2f} ms of profiled self time per epoch; largest differences:")
        for k in sorted(keys, key=lambda k: -abs(delta[k]))[: args.top]:
            print(f"   {delta[k]:+8.3f} ms  {prof[base].get(k, 0.0):8.3f} -> {prof[r].get(k, 0.0):8.3f}  {k[:90]}")


if __name__ == "__main__":
    main()
