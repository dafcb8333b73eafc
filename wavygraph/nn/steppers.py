r"""Residual steppers: the integrator of ``dX/dt = F`` (diffusion) or
``d2X/dt2 = F`` (wave), one step per layer.

`"Wavy Transformer" <https://arxiv.org/abs/2508.12787>`_ (NeurIPS 2025).
The force ``F`` (for attention ``F = A X - X``) is computed by the layer;
the stepper only integrates, the way ODE solvers keep the right-hand side
apart from the solver. Every stepper has

* ``init(x) -> StepState`` (velocity or displacement starts at zero), and
* ``forward(state, force) -> StepState``, one step,

and :meth:`Stepper.integrate` runs many steps of a force function.

========== ===================================================================
name       update
========== ===================================================================
diffusion  ``X' = X + tau F``
wave       ``Y' = Y + tau F;  X' = X + tau Y'``   (symplectic Euler)
mix        ``Y' = Y + tau F;  X' = lam (X + tau Y') + (1 - lam)(X + tau F)``
light_wave ``D' = lam D + tau F;  X' = X + D'``  (``D = X - X_prev``)
========== ===================================================================

``lam = sigmoid(theta)``, ``theta`` one learnable entry per channel.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor, nn


class StepState(NamedTuple):
    """Node state ``x`` (N, C) and, for second-order kinds, its velocity or
    displacement ``v`` (N, C); ``v`` is :obj:`None` for ``diffusion``."""

    x: Tensor
    v: Optional[Tensor] = None


def _logit(p: float) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"lam0 must lie in [0, 1], got {p!r}")
    if p == 0.0:
        return -math.inf
    if p == 1.0:
        return math.inf
    return math.log(p / (1.0 - p))


class Stepper(nn.Module):
    """Base class: owns the loop (:meth:`integrate`), subclasses write one
    :meth:`forward` step.

    Args:
        channels (int): number of channels ``C`` of the state.
        tau (float, optional): step size, > 0. (default: :obj:`0.5`)
    """

    second_order = False

    def __init__(self, channels: int, tau: float = 0.5):
        super().__init__()
        if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
            raise ValueError(f"channels must be a positive integer, got {channels!r}")
        if not isinstance(tau, (int, float)) or isinstance(tau, bool) or not math.isfinite(tau) or tau <= 0:
            raise ValueError(f"tau must be a positive number, got {tau!r}")
        self.channels = channels
        self.tau = float(tau)

    def reset_parameters(self) -> None:
        pass

    def init(self, x: Tensor) -> StepState:
        """The state at depth 0: ``x`` at rest (zero velocity)."""
        return StepState(x, torch.zeros_like(x) if self.second_order else None)

    @staticmethod
    def update(x: Tensor, v: Tensor | None, force: Tensor, tau: float, lam: Tensor | None):  # pragma: no cover
        """One step as a pure function of tensors: ``(x', v')`` from
        ``(x, v)``, the force, the step size and (for the kinds with a
        mixing weight) ``lam``, shape ``(C,)`` in the force's dtype. The
        module's :meth:`forward` and the compiled step-and-norm
        (:mod:`wavygraph.nn.fused`) both call it."""
        raise NotImplementedError

    def lam_or_none(self, dtype: torch.dtype) -> Tensor | None:
        """``lam`` in ``dtype`` for the kinds that have one, else :obj:`None`."""
        return None

    def forward(self, state: StepState, force: Tensor) -> StepState:
        return StepState(*self.update(state.x, state.v, force, self.tau, self.lam_or_none(force.dtype)))

    def integrate(self, x0: Tensor, force_fn: Callable[[Tensor], Tensor], num_steps: int) -> list[StepState]:
        """Run ``num_steps`` steps from ``init(x0)``; returns all states,
        the initial one first."""
        states = [self.init(x0)]
        for _ in range(num_steps):
            states.append(self(states[-1], force_fn(states[-1].x)))
        return states

    def extra_repr_args(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, tau={self.tau}{self.extra_repr_args()})"


class _LearnableLam(Stepper):
    """A stepper with the per-channel mixing weight ``lam = sigmoid(theta)``."""

    default_lam0 = 0.5

    def __init__(self, channels: int, tau: float = 0.5, lam0: float | None = None):
        super().__init__(channels, tau)
        self.lam0 = self.default_lam0 if lam0 is None else float(lam0)
        self._theta0 = _logit(self.lam0)
        self.theta = nn.Parameter(torch.empty(channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.theta, self._theta0)

    @property
    def lam(self) -> Tensor:
        return torch.sigmoid(self.theta)  # (C,)

    def lam_or_none(self, dtype: torch.dtype) -> Tensor:
        return self.lam.to(dtype)

    def extra_repr_args(self) -> str:
        return f", lam0={self.lam0:g}"


class DiffusionStepper(Stepper):
    r"""Explicit Euler for graph diffusion, :math:`X' = X + \tau F`: with
    ``tau = 0.5`` DIFFormer's ``0.5 conv(x) + 0.5 x``.

    Shapes:
        - **input:** state ``x (N, C)``, force ``(N, C)``
        - **output:** state ``x (N, C)``
    """

    @staticmethod
    def update(x, v, force, tau, lam):
        return x + tau * force, None


class WaveStepper(Stepper):
    r"""Symplectic Euler for the wave equation (Full Wave):
    :math:`Y' = Y + \tau F,\ X' = X + \tau Y'`. For a linear force
    :math:`F = -KX` the modified energy
    :math:`|Y|^2 + X^\top K X - \tau X^\top K Y` is conserved exactly.

    Shapes:
        - **input:** state ``x, v (N, C)``, force ``(N, C)``
        - **output:** state ``x, v (N, C)``
    """

    second_order = True

    @staticmethod
    def update(x, v, force, tau, lam):
        v = v + tau * force
        return x + tau * v, v


class MixStepper(_LearnableLam):
    r"""Mix of wave and diffusion (Mix + Full):
    :math:`Y' = Y + \tau F,\ X' = \lambda(X + \tau Y') + (1-\lambda)(X + \tau F)`,
    :math:`\lambda = \sigma(\theta)` per channel; ``lam0`` sets its initial
    value (default 0.5). :math:`\lambda = 0` is ``diffusion``, 1 is ``wave``.

    Shapes:
        - **input:** state ``x, v (N, C)``, force ``(N, C)``
        - **output:** state ``x, v (N, C)``
    """

    second_order = True

    @staticmethod
    def update(x, v, force, tau, lam):
        v = v + tau * force
        return lam * (x + tau * v) + (1.0 - lam) * (x + tau * force), v


class LightWaveStepper(_LearnableLam):
    r"""Light Wave (Mix + Light): diffusion plus momentum,
    :math:`X' = X + \tau F + \lambda (X - X_{prev})`, carried as the
    displacement :math:`D = X - X_{prev}`:
    :math:`D' = \lambda D + \tau F,\ X' = X + D'`.

    :math:`\lambda \to 0` is ``diffusion``; :math:`\lambda = 1` is the
    leapfrog wave step :math:`X' = 2X - X_{prev} + \tau F`. ``lam0``
    defaults to :math:`\sigma(2) \approx 0.88`: a momentum that starts near 1
    is what kept deep stacks from collapsing in our Cora runs (see README).
    Adds ``C`` parameters and two element-wise ops per layer.

    Shapes:
        - **input:** state ``x, v (N, C)`` (``v`` the displacement), force ``(N, C)``
        - **output:** state ``x, v (N, C)``
    """

    second_order = True
    default_lam0 = 1.0 / (1.0 + math.exp(-2.0))

    @staticmethod
    def update(x, d, force, tau, lam):
        d = (tau * force).addcmul_(lam, d)  # tau F + lam D, one buffer
        return x + d, d


STEPPERS: dict[str, type[Stepper]] = {
    "diffusion": DiffusionStepper,
    "wave": WaveStepper,
    "mix": MixStepper,
    "light_wave": LightWaveStepper,
}


def make_stepper(name: str, channels: int, tau: float = 0.5, **options) -> Stepper:
    """Build a stepper by name (``diffusion``, ``wave``, ``mix``,
    ``light_wave``); ``options`` go to its constructor (``lam0`` for ``mix``
    and ``light_wave``). Unknown names or options raise :class:`ValueError`."""
    if name not in STEPPERS:
        raise ValueError(f"unknown residual {name!r}; choose one of {', '.join(map(repr, STEPPERS))}")
    cls = STEPPERS[name]
    allowed = {"lam0"} if issubclass(cls, _LearnableLam) else set()
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(
            f"residual {name!r} takes no option {', '.join(unknown)}"
            + (f"; its options: {', '.join(sorted(allowed))}" if allowed else "")
        )
    return cls(channels, tau, **options)
