"""The base class and the registry: errors, reprs, the order of the built-in
kinds, and a kind registered from outside the package."""
import pytest

from wavygraph.nn import Stepper, make_stepper, register_stepper, unregister_stepper
from wavygraph.nn.steppers import STEPPERS


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
