"""Every kind's step + norm, eager and compiled (wavygraph.nn.steppers.compiled),
against a literal transcription of its formula written here."""
import pytest
import torch

from wavygraph.nn import WavyDIFFormer
from wavygraph.nn.joint_norm import JointLayerNorm
from wavygraph.nn.steppers import StepState, compiled, make_stepper
from wavygraph.nn.model import DIFFORMER_ARGS


def _layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    sigma = (((x - mu) ** 2).mean(-1, keepdim=True) + eps).sqrt()
    return w * (x - mu) / sigma + b, sigma


def _joint_ln(x, v, w, b, eps):
    xo, sigma = _layer_norm(x, w, b, eps)
    return xo, w * v / sigma  # velocity: the state's 1/sigma, gamma, no shift


# Literal transcriptions of each kind's step followed by its norm (the paper,
# the authors' code); a newly registered kind has no entry and fails below,
# instead of being skipped.
def _ref_diffusion(x, v, f, tau, lam, w, b, eps):
    return _layer_norm(x + tau * f, w, b, eps)[0], None


def _ref_wave(x, v, f, tau, lam, w, b, eps):
    v = v + tau * f
    return _joint_ln(x + tau * v, v, w, b, eps)


def _ref_mix(x, v, f, tau, lam, w, b, eps):
    v = lam * (tau * f + v) + (1 - lam) * f
    return _joint_ln(tau * v + x, v, w, b, eps)


def _ref_light_wave(x, x_prev, f, tau, lam, w, b, eps):
    return _layer_norm(x + tau * f + lam * (x - x_prev), w, b, eps)[0], x


def _ref_light_wave_joint(x, d, f, tau, lam, w, b, eps):
    d = lam * d + tau * f
    return _joint_ln(x + d, d, w, b, eps)


def _ref_leapfrog(x, v, f, tau, lam, w, b, eps):
    v = v + tau * f  # the norm acts inside the force: none after the step
    return x + tau * v, v


REFERENCES = {
    "leapfrog": _ref_leapfrog,
    "diffusion": _ref_diffusion,
    "wave": _ref_wave,
    "mix": _ref_mix,
    "light_wave": _ref_light_wave,
    "light_wave_joint": _ref_light_wave_joint,
}


def _case(kind, seed=0, n=40, c=6):
    g = torch.Generator().manual_seed(seed)
    stepper = make_stepper(kind, c, tau=0.3).double()
    norm = JointLayerNorm(c).double()
    with torch.no_grad():
        norm.weight.copy_(torch.rand(c, generator=g, dtype=torch.float64) + 0.5)
        norm.bias.copy_(torch.randn(c, generator=g, dtype=torch.float64))
        if hasattr(stepper, "theta"):
            stepper.theta.copy_(torch.randn(c, generator=g, dtype=torch.float64))
    x = (torch.randn(n, c, generator=g, dtype=torch.float64) * 2 + 1).requires_grad_()
    v = torch.randn(n, c, generator=g, dtype=torch.float64).requires_grad_() if stepper.second_order else None
    f = torch.randn(n, c, generator=g, dtype=torch.float64).requires_grad_()
    return stepper, norm, x, v, f


def _outputs_and_grads(stepper, norm, x, v, f, run):
    xo, vo = run()
    g = torch.Generator().manual_seed(7)
    loss = (xo * torch.randn(xo.shape, generator=g, dtype=xo.dtype)).sum()
    if vo is not None:
        loss = loss + (vo * torch.randn(vo.shape, generator=g, dtype=vo.dtype)).sum()
    leaves = [t for t in (x, v, f) if t is not None] + list(stepper.parameters()) + list(norm.parameters())
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(t) if gr is None else gr for gr, t in zip(grads, leaves)]
    return [xo.detach()] + ([] if vo is None else [vo.detach()]) + list(grads)


@pytest.mark.parametrize("impl", [pytest.param("compile", marks=pytest.mark.slow), "eager"])
def test_step_and_norm_equals_the_literal_formula(residual_kind, impl):
    assert residual_kind in REFERENCES, f"write the reference formula of the new kind {residual_kind!r} here"
    stepper, norm, x, v, f = _case(residual_kind)
    lam = getattr(stepper, "lam", None)

    def ref():
        return REFERENCES[residual_kind](x, v, f, stepper.tau, lam, norm.weight, norm.bias, norm.eps)

    expected = _outputs_and_grads(stepper, norm, x, v, f, ref)
    out = _outputs_and_grads(stepper, norm, x, v, f, lambda: stepper.step_and_norm(StepState(x, v), f, norm, impl))
    assert len(out) == len(expected)
    for a, b in zip(out, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _count_compiles(monkeypatch):
    calls = []
    real = compiled._compiled_for

    def spy(kind, joint):
        calls.append(kind)
        return real(kind, joint)

    monkeypatch.setattr(compiled, "_compiled_for", spy)
    return calls


def test_eager_under_autocast_and_mixed_dtypes(monkeypatch):
    calls = _count_compiles(monkeypatch)
    stepper, norm, x, v, f = _case("wave")
    stepper.step_and_norm(StepState(x, v.float()), f, norm, "compile")  # mixed dtypes
    with torch.autocast("cpu", dtype=torch.bfloat16):
        stepper.float().step_and_norm(StepState(x.float(), v.float()), f.float(), norm.float(), "compile")
    assert calls == []


@pytest.mark.slow
def test_model_compiled_step_equals_eager(residual_kind):
    torch.manual_seed(0)
    x = torch.randn(120, 5, dtype=torch.float64)
    ei = torch.randint(0, 120, (2, 400))
    runs = {}
    for impl in ("eager", "compile"):
        torch.manual_seed(1)
        model = WavyDIFFormer(5, 8, 3, **{**DIFFORMER_ARGS, "num_layers": 3, "residual": residual_kind,
                                          "step_impl": impl, "ffn": True}).double()  # no source: the fused step runs
        out = model(x, ei)
        out.square().sum().backward()
        runs[impl] = [out.detach()] + [p.grad for p in model.parameters()]
    for a, b in zip(runs["compile"], runs["eager"]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_model_rejects_unknown_step_impl():
    with pytest.raises(ValueError, match="step_impl.*'eager', 'compile'"):
        WavyDIFFormer(5, 8, 3, step_impl="triton")


def test_failed_compile_names_the_way_out(monkeypatch, tmp_path, capsys):
    """A toolchain failure becomes StepCompileError (library) and one CLI line."""
    def compiled_that_fails(kind, joint):
        def fn(*args):
            raise torch._dynamo.exc.TorchDynamoException("InvalidCxxCompiler: No working C++ compiler found\nmore")

        return fn

    monkeypatch.setattr(compiled, "_compiled_for", compiled_that_fails)
    stepper, norm, x, v, f = _case("wave")
    with pytest.raises(compiled.StepCompileError, match="WaveStepper step failed .*No working C\\+\\+ compiler.*step_impl='eager'"):
        stepper.step_and_norm(StepState(x, v), f, norm, "compile")
    from wavygraph.cli import main

    rc = main(["train", "data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=200", "train.epochs=1",
               "model.step_impl=compile", "train.progress=false", f"out_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "model.step_impl=eager" in err and "C++ compiler" in err
    assert not (tmp_path / "run" / "metrics.json").exists()
