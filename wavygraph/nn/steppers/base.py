r"""The base class of the residual kinds: the state a kind carries, the step
followed by the normalisation, and the loop of steps."""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor, nn

from wavygraph.checks import check_positive_int

from ..joint_norm import JointLayerNorm
from . import compiled


class StepState(NamedTuple):
    """Node state ``x`` (N, C) and, for second-order kinds, the extra state
    ``v`` (N, C): a velocity, or what the kind documents (``light_wave``:
    the previous state); ``v`` is :obj:`None` for first-order kinds."""

    x: Tensor
    v: Optional[Tensor] = None


#: ``norm(x, v) -> (x', v')``: the normalisation after a step (a
#: :class:`~wavygraph.nn.joint_norm.JointLayerNorm` or any callable alike).
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

    * ``second_order`` (default :obj:`False`): the kind carries a second
      state ``v`` beside ``x`` (:attr:`StepState.v`), which :meth:`update`
      receives and returns. :meth:`init` starts it at zero (a velocity at
      rest) unless the kind overrides :meth:`init`. :obj:`False`: ``v`` is
      :obj:`None` at every layer.
    * ``v_is_derivative`` (default :obj:`True`; read only with
      ``second_order``): ``v`` is the time derivative of ``x`` (a
      velocity), so whatever the block applies to ``x`` acts on ``v`` as
      its derivative (chain rule): the joint LayerNorm scales it by the
      state's ``1/sigma``, the joint FFN maps it by its Jacobian at ``x``,
      and the state's dropout mask drops the same entries. :obj:`False`:
      ``v`` is some other carried state (``light_wave``: the previous
      layer's output), which the norm, FFN and dropout pass through
      untouched.
    * ``pre_norm`` (default :obj:`False`): the model applies the layer's
      norm to ``x`` inside the force and none after the step
      (``leapfrog``); :obj:`False`: the norm follows the step
      (:meth:`step_and_norm`).
    * ``invertible`` (default :obj:`False`): the kind has an
      ``inverse(x, v, force_fn, tau)`` that rebuilds a step's input from
      its output, which ``reversible=True`` needs (``leapfrog``).
    * ``default_tau`` (default ``0.5``) and ``default_options`` (default
      ``{}``): the step size and options the model takes for
      ``tau=None`` and ``residual_options=None``
      (:data:`~wavygraph.nn.model_args.RECIPE_ARGS`), chosen by validation
      accuracy in the usual PyG loop (docs/benchmarks.md).

    Args:
        channels (int): number of channels ``C`` of the state.
        tau (float, optional): step size, > 0. (default: :obj:`0.5`)
    """

    second_order = False
    v_is_derivative = True
    pre_norm = False
    invertible = False
    default_tau = 0.5
    default_options: dict = {}

    def __init__(self, channels: int, tau: float = 0.5):
        super().__init__()
        check_positive_int("channels", channels)
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
        (:mod:`wavygraph.nn.steppers.compiled`) both call it."""
        raise NotImplementedError

    def lam_or_none(self, dtype: torch.dtype) -> Tensor | None:
        """``lam`` in ``dtype`` for the kinds that have one, else :obj:`None`."""
        return None

    def forward(self, state: StepState, force: Tensor) -> StepState:
        return StepState(*self.update(state.x, state.v, force, self.tau, self.lam_or_none(force.dtype)))

    def step_and_norm(self, state: StepState, force: Tensor, norm: Norm, impl: str = "eager") -> StepState:
        """One step followed by ``norm``. With ``v_is_derivative`` the norm
        sees ``(x', v')`` (the joint LayerNorm scales the velocity by the
        state's ``1/sigma``), else only ``x'``. ``impl="compile"`` runs the
        step and a :class:`~wavygraph.nn.joint_norm.JointLayerNorm` as one
        function through ``torch.compile`` (:mod:`wavygraph.nn.steppers.compiled`)."""
        if isinstance(norm, JointLayerNorm) and compiled.use_compiled(impl, state, force, norm):
            return StepState(*compiled.step_and_norm(self, norm, state, force))
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
