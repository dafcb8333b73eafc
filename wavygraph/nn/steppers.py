r"""Residual steppers: the integrator of ``dX/dt = F`` (diffusion) or
``d2X/dt2 = F`` (wave), one step per layer.

`"Wavy Transformer" <https://arxiv.org/abs/2508.12787>`_ (NeurIPS 2025).
The force ``F`` (for attention ``F = A X - X``) is computed by the layer;
the stepper integrates it, the way ODE solvers keep the right-hand side
apart from the solver. A stepper owns everything that is particular to its
kind: the update, its extra state, its options and how the normalisation
after the step treats that state (:meth:`Stepper.step_and_norm`).

================= ================================================================ ======================
name              update (per layer)                                               source
================= ================================================================ ======================
diffusion         ``X' = X + tau F``                                               DIFFormer, the paper
wave              ``Y' = Y + tau F;  X' = X + tau Y'``  (symplectic Euler)          the paper (Full Wave)
mix               ``Y' = lam (Y + tau F) + (1 - lam) F;  X' = X + tau Y'``          the authors' BERT code
light_wave        ``X' = X + tau F + lam (X - X_prev)``, ``X_prev`` of layer 0 = X  the paper (Light Wave)
light_wave_joint  ``D' = lam D + tau F;  X' = X + D'``, ``D`` through the joint norm this package's own
================= ================================================================ ======================

``lam = sigmoid(theta)``, ``theta`` one learnable entry per channel and layer.

A new kind is one subclass of :class:`Stepper` that writes :meth:`Stepper.update`
(and sets :attr:`Stepper.second_order`), registered with
:func:`register_stepper`; its constructor's keyword arguments after ``tau``
are its options. The model, the config, the CLI, sweeps, reports, the demo
and the tests find it in :data:`STEPPERS`.
"""
from __future__ import annotations

import inspect
import math
from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from . import fused
from .joint import JointLayerNorm, needs_plain_ops
from .light_wave_fn import LightWaveLayerNorm, LightWaveStep, light_wave_update


class StepState(NamedTuple):
    """Node state ``x`` (N, C) and, for second-order kinds, the extra state
    ``v`` (N, C): a velocity, or what the kind documents (``light_wave``:
    the previous state); ``v`` is :obj:`None` for first-order kinds."""

    x: Tensor
    v: Optional[Tensor] = None


#: ``norm(x, v) -> (x', v')``: the normalisation after a step (a
#: :class:`~wavygraph.nn.joint.JointLayerNorm` or any callable alike).
Norm = Callable[[Tensor, Optional[Tensor]], tuple]


def _logit(p: float) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"lam0 must lie in [0, 1], got {p!r}")
    if p == 0.0:
        return -math.inf
    if p == 1.0:
        return math.inf
    return math.log(p / (1.0 - p))


class Stepper(nn.Module):
    """Base class: owns the loop (:meth:`integrate`) and the step followed
    by the normalisation (:meth:`step_and_norm`); a subclass writes one
    :meth:`update`.

    Class attributes a subclass sets:

    * ``second_order`` (default :obj:`False`): the kind carries ``v``.
    * ``v_is_derivative`` (default :obj:`True`): ``v`` is the time
      derivative of ``x``, so the joint norm, FFN and dropout act on it as
      on ``x`` (chain rule). :obj:`False`: ``v`` passes through them
      untouched.

    Args:
        channels (int): number of channels ``C`` of the state.
        tau (float, optional): step size, > 0. (default: :obj:`0.5`)
    """

    second_order = False
    v_is_derivative = True

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

    def step_and_norm(self, state: StepState, force: Tensor, norm: Norm, impl: str = "eager") -> StepState:
        """One step followed by ``norm``. With ``v_is_derivative`` the norm
        sees ``(x', v')`` (the joint LayerNorm scales the velocity by the
        state's ``1/sigma``), else only ``x'``. ``impl="compile"`` fuses the
        step and a :class:`~wavygraph.nn.joint.JointLayerNorm` with
        ``torch.compile`` (:mod:`wavygraph.nn.fused`)."""
        if isinstance(norm, JointLayerNorm) and fused.use_compiled(impl, state, force, norm):
            return StepState(*fused.step_and_norm(self, norm, state, force))
        x, v = self(state, force)
        if self.v_is_derivative:
            return StepState(*norm(x, v))
        return StepState(norm(x, None)[0], v)

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


class LearnableLamStepper(Stepper):
    """A stepper with the per-channel mixing weight ``lam = sigmoid(theta)``;
    ``lam0`` (option) sets its initial value, default :attr:`default_lam0`."""

    default_lam0 = 0.5

    def __init__(self, channels: int, tau: float = 0.5, lam0: float | None = None):
        super().__init__(channels, tau)
        self.lam0 = self.default_lam0 if lam0 is None else lam0
        self._theta0 = _logit(self.lam0)
        self.lam0 = float(self.lam0)
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
        return torch.add(x, force, alpha=tau), None


class WaveStepper(Stepper):
    r"""Symplectic Euler for the wave equation (the paper's Full Wave):
    :math:`Y' = Y + \tau F,\ X' = X + \tau Y'`, :math:`Y_0 = 0`. For a linear
    force :math:`F = -KX` the modified energy
    :math:`|Y|^2 + X^\top K X - \tau X^\top K Y` is conserved exactly.

    Shapes:
        - **input:** state ``x, v (N, C)``, force ``(N, C)``
        - **output:** state ``x, v (N, C)``
    """

    second_order = True

    @staticmethod
    def update(x, v, force, tau, lam):
        v = torch.add(v, force, alpha=tau)
        return torch.add(x, v, alpha=tau), v


class MixStepper(LearnableLamStepper):
    r"""Mix of wave and diffusion (Mix + Full), as the Wavy Transformer
    authors' BERT code computes it: the velocities are mixed, then the state
    steps with the mixed velocity,

    .. math::
        Y' = \lambda (Y + \tau F) + (1 - \lambda) F, \qquad X' = X + \tau Y',

    so :math:`X' - X = \tau Y'` at every layer. :math:`\lambda = \sigma(\theta)`
    per channel; ``lam0`` sets its initial value (default 0.5, the authors'
    :math:`\sigma(0)`). :math:`\lambda = 1` is ``wave``; :math:`\lambda = 0`
    is ``diffusion`` (:math:`X' = X + \tau F`).

    Shapes:
        - **input:** state ``x, v (N, C)``, force ``(N, C)``
        - **output:** state ``x, v (N, C)``
    """

    second_order = True

    @staticmethod
    def update(x, v, force, tau, lam):
        dtype = torch.promote_types(v.dtype, force.dtype)  # mixed under autocast
        force = force.to(dtype)
        v = torch.lerp(force, torch.add(v.to(dtype), force, alpha=tau), lam.to(dtype))  # lam (v + tau F) + (1 - lam) F
        return torch.add(x, v, alpha=tau), v


class LightWaveStepper(LearnableLamStepper):
    r"""Light Wave (Mix + Light) as the paper writes it: diffusion plus a
    momentum term,

    .. math::
        X^{\ell+1} = \mathrm{LN}\big(X^\ell + \tau F^\ell
            + \lambda (X^\ell - X^{\ell-1})\big), \qquad X^{-1} = X^0,

    and nothing else: the extra state ``v`` is the previous layer's output
    :math:`X^{\ell-1}` (``init`` sets it to :math:`X^0`), which no norm,
    FFN or dropout touches. :math:`\lambda \to 0` is ``diffusion``;
    :math:`\lambda = 1` is the leapfrog wave step
    :math:`X' = 2X - X_{prev} + \tau F` (before the norm). ``lam0``
    defaults to 0.5, the authors' initialisation of their mixing weight
    (:math:`\sigma(0)`, BERT code); the paper states none for Light Wave.
    Adds ``C`` parameters and a few element-wise ops per layer.

    Shapes:
        - **input:** state ``x, v (N, C)`` (``v`` the previous state), force ``(N, C)``
        - **output:** state ``x, v (N, C)`` (``v`` the input ``x``)
    """

    second_order = True
    v_is_derivative = False

    def init(self, x: Tensor) -> StepState:
        return StepState(x, x)

    @staticmethod
    def update(x, v, force, tau, lam):
        return light_wave_update(x, v, force, tau, lam), x

    def forward(self, state: StepState, force: Tensor) -> StepState:
        x, v = state
        lam = self.lam_or_none(force.dtype)
        if needs_plain_ops(x, v, force, lam):
            return StepState(*self.update(x, v, force, self.tau, lam))
        return StepState(LightWaveStep.apply(x, v, force, lam, self.tau), x)

    def step_and_norm(self, state: StepState, force: Tensor, norm: Norm, impl: str = "eager") -> StepState:
        """Eager with a :class:`~wavygraph.nn.joint.JointLayerNorm`: the step
        and the norm in one autograd function
        (:class:`~wavygraph.nn.light_wave_fn.LightWaveLayerNorm`, equal to
        the composition, tested); otherwise the step, then ``norm``."""
        x, v = state
        if (not isinstance(norm, JointLayerNorm) or impl != "eager" or fused.is_compiling()
                or needs_plain_ops(x, v, force, norm.weight)):
            return super().step_and_norm(state, force, norm, impl)
        lam = self.lam_or_none(force.dtype)
        return StepState(LightWaveLayerNorm.apply(x, v, force, lam, norm.weight, norm.bias, self.tau, norm.eps), x)


#: The registry of residual kinds, name -> class, in registration order.
STEPPERS: dict[str, type[Stepper]] = {}


def register_stepper(name: str, cls: type[Stepper] | None = None, *, replace: bool = False):
    """Register a residual kind under ``name`` (also usable as a class
    decorator, ``@register_stepper("name")``). ``cls`` must subclass
    :class:`Stepper`; its constructor's keyword arguments after ``tau`` are
    its options (``make_stepper(name, C, tau, **options)``). Raises
    :class:`ValueError` for a taken name unless ``replace=True``."""

    def add(cls: type[Stepper]) -> type[Stepper]:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a residual name must be an identifier-like string, got {name!r}")
        if not (isinstance(cls, type) and issubclass(cls, Stepper)):
            raise ValueError(f"register_stepper({name!r}, ...) needs a subclass of wavygraph.nn.Stepper, got {cls!r}")
        if name in STEPPERS and STEPPERS[name] is not cls and not replace:
            raise ValueError(f"residual {name!r} is already registered ({STEPPERS[name].__name__}); pass replace=True")
        STEPPERS[name] = cls
        return cls

    return add if cls is None else add(cls)


def unregister_stepper(name: str) -> None:
    """Remove a registered kind (for tests and plugins)."""
    STEPPERS.pop(name, None)


def stepper_options(name: str) -> tuple[str, ...]:
    """The option names the kind's constructor takes after ``channels`` and ``tau``."""
    params = list(inspect.signature(get_stepper(name).__init__).parameters.values())[3:]
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def get_stepper(name: str) -> type[Stepper]:
    """The class registered as ``name``; :class:`ValueError` listing the kinds otherwise."""
    if name not in STEPPERS:
        raise ValueError(f"unknown residual {name!r}; choose one of {', '.join(map(repr, STEPPERS))}")
    return STEPPERS[name]


def plugin_modules(names) -> list[str]:
    """The modules that registered the kinds ``names`` from outside the
    package: what a config's ``imports`` must list so that another process
    (a sweep worker) knows those kinds too."""
    mods = [get_stepper(n).__module__ for n in names]
    return sorted({m for m in mods if m != "__main__" and m.split(".")[0] != "wavygraph"})


def make_stepper(name: str, channels: int, tau: float = 0.5, **options) -> Stepper:
    """Build a stepper by name (see :data:`STEPPERS`); ``options`` go to
    its constructor (``lam0`` for ``mix`` and the light waves). Unknown
    names or options raise :class:`ValueError` that lists the valid ones."""
    cls = get_stepper(name)
    allowed = stepper_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"residual {name!r} takes no option {', '.join(unknown)}"
            + (f"; its options: {', '.join(allowed)}" if allowed else "; it has no options")
        )
    return cls(channels, tau, **options)


for _name, _cls in (
    ("diffusion", DiffusionStepper),
    ("wave", WaveStepper),
    ("mix", MixStepper),
    ("light_wave", LightWaveStepper),
):
    register_stepper(_name, _cls)
