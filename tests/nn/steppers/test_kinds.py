"""The built-in kinds' dynamics against problems with known solutions (linear
oscillators, float64): the wave's conserved modified energy, diffusion's decay,
the limits of the mixing weight (``lam = 0`` is diffusion, ``lam = 1`` the
wave or the leapfrog step) and each kind's literal update."""
import math

import pytest
import torch

from wavygraph.nn import StepState, make_stepper


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
