"""The compiled step + joint LayerNorm (wavygraph.nn.fused) against the
eager composition ``norm(*stepper(state, force))``."""
import pytest
import torch

from wavygraph.nn import WavyDIFFormer, fused
from wavygraph.nn.joint import JointLayerNorm
from wavygraph.nn.steppers import StepState, make_stepper

KINDS = ["diffusion", "wave", "mix", "light_wave"]


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
    grads = torch.autograd.grad(loss, leaves)
    return [xo.detach()] + ([] if vo is None else [vo.detach()]) + list(grads)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("impl", ["compile", "eager"])
def test_step_and_norm_equals_composition(kind, impl):
    stepper, norm, x, v, f = _case(kind)
    ref = _outputs_and_grads(stepper, norm, x, v, f, lambda: norm(*stepper(StepState(x, v), f)))
    out = _outputs_and_grads(
        stepper, norm, x, v, f, lambda: fused.step_and_norm(stepper, norm, StepState(x, v), f, impl)
    )
    assert len(out) == len(ref)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _count_compiles(monkeypatch):
    calls = []
    real = fused._compiled_for

    def spy(kind):
        calls.append(kind)
        return real(kind)

    monkeypatch.setattr(fused, "_compiled_for", spy)
    return calls


def test_eager_under_autocast_and_mixed_dtypes(monkeypatch):
    calls = _count_compiles(monkeypatch)
    stepper, norm, x, v, f = _case("light_wave")
    fused.step_and_norm(stepper, norm, StepState(x, v.float()), f, "compile")  # mixed dtypes
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused.step_and_norm(stepper.float(), norm.float(), StepState(x.float(), v.float()), f.float(), "compile")
    assert calls == []


@pytest.mark.parametrize("kind", KINDS)
def test_model_compiled_step_equals_eager(kind):
    torch.manual_seed(0)
    x = torch.randn(120, 5, dtype=torch.float64)
    ei = torch.randint(0, 120, (2, 400))
    runs = {}
    for impl in ("eager", "compile"):
        torch.manual_seed(1)
        model = WavyDIFFormer(5, 8, 3, num_layers=3, residual=kind, step_impl=impl).double()
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
    def compiled_that_fails(kind):
        def fn(*args):
            raise torch._dynamo.exc.TorchDynamoException("InvalidCxxCompiler: No working C++ compiler found\nmore")

        return fn

    monkeypatch.setattr(fused, "_compiled_for", compiled_that_fails)
    stepper, norm, x, v, f = _case("wave")
    with pytest.raises(fused.StepCompileError, match="WaveStepper step failed .*No working C\\+\\+ compiler.*step_impl='eager'"):
        fused.step_and_norm(stepper, norm, StepState(x, v), f, "compile")
    from wavygraph.cli import main

    rc = main(["train", "data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=200", "train.epochs=1",
               "model.step_impl=compile", "train.progress=false", f"out_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "model.step_impl=eager" in err and "C++ compiler" in err
    assert not (tmp_path / "run" / "metrics.json").exists()
