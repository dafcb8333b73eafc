import math

import pytest
import torch

from wavygraph.nn import StepState, make_stepper
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
    stepper = make_stepper("light_wave", 6, tau=tau, lam0=1.0).double()
    assert torch.equal(stepper.lam, torch.ones(6, dtype=torch.float64))
    x0 = start()
    states = stepper.integrate(x0, lambda x: -x @ K, 10_000)
    # leapfrog X' = 2X - X_prev + tau F with X_prev = X_0 at the start (D0 = 0)
    prev, cur = x0, x0
    for step in range(1, 10_001):
        prev, cur = cur, 2 * cur - prev + tau * (-cur @ K)
        if step % 1000 == 0:
            torch.testing.assert_close(states[step].x, cur, rtol=1e-9, atol=1e-9)
    # and it does not decay (a wave): amplitude at the end comparable to start
    assert states[-1].x.norm() > 0.1 * x0.norm()


def test_light_wave_lam_zero_is_diffusion():
    K = spd_matrix()
    lw = make_stepper("light_wave", 6, tau=0.5, lam0=0.0).double()
    df = make_stepper("diffusion", 6, tau=0.5).double()
    a = lw.integrate(start(), lambda x: -x @ K, 200)
    b = df.integrate(start(), lambda x: -x @ K, 200)
    for s, t in zip(a, b):
        assert torch.equal(s.x, t.x)


def test_mix_lam_zero_is_diffusion_exactly():
    K = spd_matrix()
    mix = make_stepper("mix", 6, tau=0.5, lam0=0.0).double()
    df = make_stepper("diffusion", 6, tau=0.5).double()
    a = mix.integrate(start(), lambda x: -x @ K, 10_000)
    b = df.integrate(start(), lambda x: -x @ K, 10_000)
    for s, t in zip(a[::100], b[::100]):
        assert torch.equal(s.x, t.x)


def test_mix_lam_one_is_wave():
    K = spd_matrix()
    mix = make_stepper("mix", 6, tau=0.5, lam0=1.0).double()
    wave = make_stepper("wave", 6, tau=0.5).double()
    a = mix.integrate(start(), lambda x: -x @ K, 500)
    b = wave.integrate(start(), lambda x: -x @ K, 500)
    torch.testing.assert_close(a[-1].x, b[-1].x, rtol=0, atol=1e-12)


def test_single_step_formulas():
    x = start()
    v = start(seed=5)
    f = start(seed=7)
    tau = 0.25
    theta = torch.linspace(-2, 2, 6, dtype=torch.float64)
    lam = torch.sigmoid(theta)
    mix = make_stepper("mix", 6, tau=tau).double()
    lw = make_stepper("light_wave", 6, tau=tau).double()
    with torch.no_grad():
        mix.theta.copy_(theta)
        lw.theta.copy_(theta)
    s = mix(StepState(x, v), f)
    y_new = v + tau * f
    torch.testing.assert_close(s.v, y_new)
    torch.testing.assert_close(s.x, lam * (x + tau * y_new) + (1 - lam) * (x + tau * f))
    s = lw(StepState(x, v), f)
    torch.testing.assert_close(s.v, lam * v + tau * f)
    torch.testing.assert_close(s.x, x + lam * v + tau * f)
    s = make_stepper("wave", 6, tau=tau)(StepState(x, v), f)
    torch.testing.assert_close(s.x, x + tau * (v + tau * f))


def test_lam_is_learnable_per_channel():
    lw = make_stepper("light_wave", 8)
    assert lw.theta.shape == (8,) and lw.theta.requires_grad
    torch.testing.assert_close(lw.lam, torch.full((8,), 1 / (1 + math.exp(-2.0))))
    assert make_stepper("mix", 8).lam[0].item() == 0.5
    x = torch.randn(3, 8)
    out = lw(StepState(x, torch.randn(3, 8)), torch.randn(3, 8))
    out.x.sum().backward()
    assert lw.theta.grad is not None and lw.theta.grad.abs().sum() > 0


def test_init_zero_velocity():
    x = torch.randn(3, 4)
    for name in ("wave", "mix", "light_wave"):
        s = make_stepper(name, 4).init(x)
        assert torch.equal(s.v, torch.zeros_like(x)) and s.x is x
    assert make_stepper("diffusion", 4).init(x).v is None


def test_errors_and_repr():
    with pytest.raises(ValueError, match="unknown residual 'heat'.*'diffusion', 'wave', 'mix', 'light_wave'"):
        make_stepper("heat", 4)
    with pytest.raises(ValueError, match="tau must be a positive number"):
        make_stepper("wave", 4, tau=0.0)
    with pytest.raises(ValueError, match="takes no option lam0"):
        make_stepper("wave", 4, lam0=0.3)
    with pytest.raises(ValueError, match="lam0 must lie in"):
        make_stepper("mix", 4, lam0=1.5)
    assert repr(make_stepper("diffusion", 4)) == "DiffusionStepper(4, tau=0.5)"
    assert repr(make_stepper("wave", 4, tau=0.2)) == "WaveStepper(4, tau=0.2)"
    assert repr(make_stepper("mix", 4)) == "MixStepper(4, tau=0.5, lam0=0.5)"
    assert repr(make_stepper("light_wave", 4)) == "LightWaveStepper(4, tau=0.5, lam0=0.880797)"
    assert set(STEPPERS) == {"diffusion", "wave", "mix", "light_wave"}
