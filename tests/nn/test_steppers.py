import math

import pytest
import torch

from wavygraph.nn import StepState, Stepper, make_stepper, register_stepper, unregister_stepper
from wavygraph.nn.steppers import STEPPERS


def spd_matrix(c=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(c, c, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(a)
    eig = torch.linspace(0.1, 1.0, c, dtype=torch.float64)
    return q @ torch.diag(eig) @ q.T


def start(c=6, n=4, seed=1):
    return torch.randn(n, c, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def modified_energy(x, v, K, tau):
    # rows are independent oscillators: sum over them
    return ((v * v).sum() + (x @ K * x).sum() - tau * (x @ K * v).sum()).item()


@pytest.mark.parametrize("tau", [0.5, 0.1])
def test_wave_conserves_modified_energy(tau):
    K = spd_matrix()
    stepper = make_stepper("wave", 6, tau=tau).double()
    x0 = start()
    state = stepper.init(x0)
    energies = []
    with torch.no_grad():
        for _ in range(10_000):
            state = stepper(state, -state.x @ K)
            energies.append(modified_energy(state.x, state.v, K, tau))
    e0 = energies[0]
    drift = max(abs(e - e0) for e in energies) / abs(e0)
    assert e0 > 0 and drift < 1e-8, drift


def test_wave_energy_is_not_trivially_constant():
    # an explicit-Euler "wave" (x updated with the old velocity) gains energy
    K = spd_matrix()
    tau = 0.5
    x, v = start(), torch.zeros(4, 6, dtype=torch.float64)
    e = []
    for _ in range(2000):
        x, v = x + tau * v, v - tau * (x @ K)
        e.append(modified_energy(x, v, K, tau))
    assert abs(e[-1] - e[0]) / abs(e[0]) > 1e-2


def test_diffusion_decays_monotonically():
    K = 0.1 * spd_matrix()  # slow modes, so 10,000 steps stay far above underflow
    stepper = make_stepper("diffusion", 6, tau=0.5).double()
    states = stepper.integrate(start(), lambda x: -x @ K, 10_000)
    norms = torch.tensor([s.x.norm().item() for s in states], dtype=torch.float64)
    assert (norms[1:] < norms[:-1]).all()  # strictly, at every one of the 10,000 steps
    assert norms[-1] < 1e-15 * norms[0]
    assert states[1].v is None


def test_light_wave_lam_one_is_leapfrog():
    K = spd_matrix()
    tau = 0.3
    for name in ("light_wave", "light_wave_joint"):
        stepper = make_stepper(name, 6, tau=tau, lam0=1.0).double()
        assert torch.equal(stepper.lam, torch.ones(6, dtype=torch.float64))
        x0 = start()
        states = stepper.integrate(x0, lambda x: -x @ K, 10_000)
        # leapfrog X' = 2X - X_prev + tau F with X_prev = X_0 at the start
        prev, cur = x0, x0
        for step in range(1, 10_001):
            prev, cur = cur, 2 * cur - prev + tau * (-cur @ K)
            if step % 1000 == 0:
                torch.testing.assert_close(states[step].x, cur, rtol=1e-9, atol=1e-9)
        # and it does not decay (a wave): amplitude at the end comparable to start
        assert states[-1].x.norm() > 0.1 * x0.norm()


@pytest.mark.parametrize("name", ["light_wave", "light_wave_joint", "mix"])
def test_lam_zero_is_diffusion_exactly(name):
    K = spd_matrix()
    st = make_stepper(name, 6, tau=0.5, lam0=0.0).double()
    df = make_stepper("diffusion", 6, tau=0.5).double()
    a = st.integrate(start(), lambda x: -x @ K, 10_000)
    b = df.integrate(start(), lambda x: -x @ K, 10_000)
    for s, t in zip(a[::100], b[::100]):
        assert torch.equal(s.x, t.x)


def test_mix_lam_one_is_wave():
    K = spd_matrix()
    mix = make_stepper("mix", 6, tau=0.5, lam0=1.0).double()
    wave = make_stepper("wave", 6, tau=0.5).double()
    a = mix.integrate(start(), lambda x: -x @ K, 10_000)
    b = wave.integrate(start(), lambda x: -x @ K, 10_000)
    for s, t in zip(a[::100], b[::100]):
        assert torch.equal(s.x, t.x) and torch.equal(s.v, t.v)


def test_mix_half_is_damped_not_conservative():
    # lam = 1/2: the velocity forgets half of itself each step, so the
    # oscillator's modified energy decays (neither wave nor diffusion)
    K = spd_matrix()
    tau = 0.5
    mix = make_stepper("mix", 6, tau=tau).double()
    states = mix.integrate(start(), lambda x: -x @ K, 2000)
    e = [modified_energy(s.x, s.v, K, tau) for s in states[1:]]
    assert e[-1] < 1e-6 * e[0]


def _theta():
    return torch.linspace(-2, 2, 6, dtype=torch.float64)


def test_mix_is_the_authors_formula():
    # the authors' BERT attention.py, transcribed: delta = output - hidden;
    # V' = a (tau delta + V) + (1 - a) delta; X' = tau V' + X
    x, v, f, tau = start(), start(seed=5), start(seed=7), 0.25
    mix = make_stepper("mix", 6, tau=tau).double()
    with torch.no_grad():
        mix.theta.copy_(_theta())
    a = torch.sigmoid(_theta())
    s = mix(StepState(x, v), f)
    v_ref = a * (tau * f + v) + (1 - a) * f
    torch.testing.assert_close(s.v, v_ref, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(s.x, tau * v_ref + x, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(s.x - x, tau * s.v, rtol=1e-14, atol=1e-14)  # X' - X = tau V'
    # the state-only mix this package had before (unmixed velocity V + tau F)
    # gives the same first state but another velocity, so the next step differs
    assert (s.v - (v + tau * f)).abs().max() > 1e-1
    s2 = mix(s, f)
    old_v = v + 2 * tau * f
    old_x2 = a * (s.x + tau * old_v) + (1 - a) * (s.x + tau * f)
    assert (s2.x - old_x2).abs().max() > 1e-2


def test_light_wave_is_the_papers_formula():
    # X^{l+1} = X^l + tau F + lam (X^l - X^{l-1}); the carried state is X^l
    x, x_prev, f, tau = start(), start(seed=5), start(seed=7), 0.25
    lw = make_stepper("light_wave", 6, tau=tau).double()
    with torch.no_grad():
        lw.theta.copy_(_theta())
    lam = torch.sigmoid(_theta())
    s = lw(StepState(x, x_prev), f)
    torch.testing.assert_close(s.x, x + tau * f + lam * (x - x_prev), rtol=1e-14, atol=1e-14)
    assert s.v is x
    assert torch.equal(lw.init(x).v, x)  # X^{-1} = X^0
    assert not lw.v_is_derivative


def test_light_wave_joint_and_wave_single_step():
    x, d, f, tau = start(), start(seed=5), start(seed=7), 0.25
    lw = make_stepper("light_wave_joint", 6, tau=tau).double()
    with torch.no_grad():
        lw.theta.copy_(_theta())
    lam = torch.sigmoid(_theta())
    s = lw(StepState(x, d), f)
    torch.testing.assert_close(s.v, lam * d + tau * f)
    torch.testing.assert_close(s.x, x + lam * d + tau * f)
    s = make_stepper("wave", 6, tau=tau)(StepState(x, d), f)
    torch.testing.assert_close(s.x, x + tau * (d + tau * f))


def test_lam_is_learnable_per_channel():
    assert make_stepper("mix", 8).lam[0].item() == 0.5
    assert make_stepper("light_wave", 8).lam[0].item() == 0.5
    torch.testing.assert_close(make_stepper("light_wave_joint", 8).lam, torch.full((8,), 1 / (1 + math.exp(-2.0))))
    for name in ("mix", "light_wave", "light_wave_joint"):
        st = make_stepper(name, 8)
        assert st.theta.shape == (8,) and st.theta.requires_grad
        x = torch.randn(3, 8)
        out = st(StepState(x, torch.randn(3, 8)), torch.randn(3, 8))
        (out.x.sum() + out.v.sum()).backward()
        assert st.theta.grad is not None and st.theta.grad.abs().sum() > 0


def test_init(residual_kind):
    x = torch.randn(3, 4)
    st = make_stepper(residual_kind, 4)
    s = st.init(x)
    assert s.x is x
    if not st.second_order:
        assert s.v is None
    elif residual_kind == "light_wave":
        assert s.v is x
    else:
        assert torch.equal(s.v, torch.zeros_like(x))


def test_errors_and_repr():
    with pytest.raises(ValueError, match="unknown residual 'heat'.*'diffusion', 'wave', 'mix', 'light_wave'"):
        make_stepper("heat", 4)
    with pytest.raises(ValueError, match="tau must be a positive number"):
        make_stepper("wave", 4, tau=0.0)
    with pytest.raises(ValueError, match="takes no option lam0; it has no options"):
        make_stepper("wave", 4, lam0=0.3)
    with pytest.raises(ValueError, match="takes no option lam; its options: lam0"):
        make_stepper("mix", 4, lam=0.3)
    with pytest.raises(ValueError, match="lam0 must lie in"):
        make_stepper("mix", 4, lam0=1.5)
    assert repr(make_stepper("diffusion", 4)) == "DiffusionStepper(4, tau=0.5)"
    assert repr(make_stepper("wave", 4, tau=0.2)) == "WaveStepper(4, tau=0.2)"
    assert repr(make_stepper("mix", 4)) == "MixStepper(4, tau=0.5, lam0=0.5)"
    assert repr(make_stepper("light_wave", 4)) == "LightWaveStepper(4, tau=0.5, lam0=0.5)"
    assert repr(make_stepper("light_wave_joint", 4)) == "JointLightWaveStepper(4, tau=0.5, lam0=0.880797)"
    assert list(STEPPERS)[:5] == ["diffusion", "wave", "mix", "light_wave", "light_wave_joint"]


class _Heun(Stepper):
    """A kind defined outside the package: Heun's method for a force that
    does not depend on x over one step is plain Euler with half weights."""

    def __init__(self, channels, tau=0.5, weight: float = 1.0):
        super().__init__(channels, tau)
        self.weight = weight

    @staticmethod
    def update(x, v, force, tau, lam):
        return x + tau * force, None


def test_register_stepper_from_outside():
    try:
        register_stepper("heun_test", _Heun)
        assert "heun_test" in STEPPERS
        st = make_stepper("heun_test", 4, tau=0.1, weight=2.0)
        assert st.weight == 2.0
        with pytest.raises(ValueError, match="its options: weight"):
            make_stepper("heun_test", 4, lam0=0.1)
        with pytest.raises(ValueError, match="already registered"):
            register_stepper("heun_test", WaveStepperLike)
        with pytest.raises(ValueError, match="subclass of wavygraph.nn.Stepper"):
            register_stepper("not_a_stepper", object)
    finally:
        unregister_stepper("heun_test")
    assert "heun_test" not in STEPPERS


class WaveStepperLike(_Heun):
    pass


@pytest.mark.parametrize("block", [8, 2**18])  # 8 elements: blocks of two rows, the last one short
def test_light_wave_step_function_gradcheck(monkeypatch, block):
    from wavygraph.nn import light_wave_fn
    from wavygraph.nn.light_wave_fn import LightWaveStep as _LightWaveStep

    monkeypatch.setattr(light_wave_fn, "BLOCK", block)

    g = torch.Generator().manual_seed(4)
    x, v, f = (torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    lam = torch.rand(4, generator=g, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: _LightWaveStep.apply(*a, 0.3), (x, v, f, lam))
    # and the module's step equals the plain update, outputs and gradients
    lw = make_stepper("light_wave", 4, tau=0.3).double()
    out = lw(StepState(x, v), f).x
    ref = lw.update(x, v, f, 0.3, lw.lam)[0]
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-15)
    w = torch.randn(7, 4, generator=g, dtype=torch.float64)
    ga = torch.autograd.grad((out * w).sum(), (x, v, f, lw.theta))
    gb = torch.autograd.grad((ref * w).sum(), (x, v, f, lw.theta))
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("block", [8, 2**18])
def test_light_wave_layer_norm_function_is_the_composition(monkeypatch, block):
    """The fused step + LayerNorm of the paper's Light Wave: gradcheck, and
    outputs and every gradient equal to LN(x + tau F + lam (x - x_prev))
    written out with plain ops (float64)."""
    from wavygraph.nn import JointLayerNorm, light_wave_fn
    from wavygraph.nn.light_wave_fn import LightWaveLayerNorm

    monkeypatch.setattr(light_wave_fn, "BLOCK", block)
    g = torch.Generator().manual_seed(5)
    x, v, f = (torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    lam = torch.rand(4, generator=g, dtype=torch.float64).requires_grad_()
    w = (torch.rand(4, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    b = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    inputs = (x, v, f, lam, w, b)
    assert torch.autograd.gradcheck(lambda *a: LightWaveLayerNorm.apply(*a, 0.3, 1e-5), inputs)

    def literal(x, v, f, lam, w, b):
        s = x + 0.3 * f + lam * (x - v)
        mu = s.mean(-1, keepdim=True)
        var = ((s - mu) ** 2).mean(-1, keepdim=True)
        return (s - mu) / torch.sqrt(var + 1e-5) * w + b

    out, ref = LightWaveLayerNorm.apply(*inputs, 0.3, 1e-5), literal(*inputs)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    probe = torch.randn(7, 4, generator=g, dtype=torch.float64)
    for a, r in zip(torch.autograd.grad((out * probe).sum(), inputs), torch.autograd.grad((ref * probe).sum(), inputs)):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)
    # the first layer (x_prev is x itself) and the stepper's own path take it
    stepper, norm = make_stepper("light_wave", 4, tau=0.3).double(), JointLayerNorm(4).double()
    state = stepper.step_and_norm(stepper.init(x), f, norm)
    torch.testing.assert_close(state.x, literal(x, x, f, stepper.lam, norm.weight, norm.bias), rtol=1e-12, atol=1e-12)
    assert state.v is x


@pytest.mark.parametrize("fused_norm", [True, False])
@pytest.mark.parametrize("block", [8, 2**18])
def test_light_wave_first_layer_takes_diffusion_path(monkeypatch, block, fused_norm):
    """Where ``X_prev`` is ``x`` itself (layer 0, ``X^{-1} = X^0``) the autograd
    functions compute ``x + tau F`` alone: outputs and gradients of ``x``, ``F``,
    the norm and ``theta`` equal the literal formula with ``X_prev = x`` (float64);
    ``theta`` gets an exact zero gradient (not ``None``: DDP sees it used), and
    with a distinct ``X_prev`` the blocked forward equals the one-shot update bit for bit."""
    from wavygraph.nn import JointLayerNorm, light_wave_fn

    monkeypatch.setattr(light_wave_fn, "BLOCK", block)
    g = torch.Generator().manual_seed(9)
    x, f = (torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    stepper = make_stepper("light_wave", 4, tau=0.3, lam0=0.7).double()
    norm = JointLayerNorm(4).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5, generator=g)
        norm.bias.normal_(generator=g)
    if fused_norm:
        out = stepper.step_and_norm(stepper.init(x), f, norm).x
    else:
        out = stepper(stepper.init(x), f).x
    x2 = x.detach().clone().requires_grad_()
    s = x + 0.3 * f + stepper.lam * (x - x2)  # X_prev = x as a separate leaf: the formula, written out
    ref = torch.nn.functional.layer_norm(s, (4,), norm.weight, norm.bias, 1e-5) if fused_norm else s
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-14)
    probe = torch.randn(7, 4, generator=g, dtype=torch.float64)
    params = (x, f, stepper.theta) + ((norm.weight, norm.bias) if fused_norm else ())
    got = torch.autograd.grad((out * probe).sum(), params)
    want = list(torch.autograd.grad((ref * probe).sum(), params + (x2,)))
    want[0] = want[0] + want.pop()  # x and X_prev are one tensor
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
    assert torch.equal(got[2], torch.zeros(4, dtype=torch.float64))
    # a distinct X_prev: blocked forward == the plain update, exactly
    v = torch.randn(7, 4, generator=g, dtype=torch.float64)
    lam = stepper.lam.detach()
    assert torch.equal(light_wave_fn._update_blocked(x.detach(), v, f.detach(), 0.3, lam),
                       light_wave_fn.light_wave_update(x.detach(), v, f.detach(), 0.3, lam))
