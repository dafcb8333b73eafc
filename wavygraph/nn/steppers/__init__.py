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
leapfrog          ``Y' = Y + tau F(X);  X' = X + tau Y'``, norm inside F (invertible) this package's own
================= ================================================================ ======================

``lam = sigmoid(theta)``, ``theta`` one learnable entry per channel and layer.

The package: :mod:`~.base` (:class:`Stepper`, :class:`StepState`,
:class:`LearnableLamStepper`), :mod:`~.registry` (:data:`STEPPERS`,
:func:`register_stepper`, :func:`make_stepper`, plugin modules), one module
per kind named as the kind, each with its own fast path beside it (*fused*:
the step and the norm in one hand-written autograd function), and
:mod:`~.compiled` (the step and the norm of any kind through
``torch.compile``, ``step_impl="compile"``). The table below registers the
built-in kinds in their order.

A new kind is one subclass of :class:`Stepper` that writes :meth:`Stepper.update`
(and sets :attr:`Stepper.second_order`), registered with
:func:`register_stepper`; its constructor's keyword arguments after ``tau``
are its options. The model, the config, the CLI, sweeps, reports, the demo
and the tests find it in :data:`STEPPERS`.
"""
from .base import LearnableLamStepper, Norm, Stepper, StepState
from .diffusion import DiffusionStepper
from .leapfrog import LeapfrogStepper
from .light_wave import LightWaveStepper
from .light_wave_joint import JointLightWaveStepper
from .mix import MixStepper
from .registry import (
    STEPPERS,
    get_stepper,
    make_stepper,
    plugin_modules,
    register_stepper,
    stepper_options,
    unregister_stepper,
)
from .wave import WaveStepper

#: The built-in kinds, in the order of :data:`STEPPERS` (name, class).
BUILTIN_STEPPERS = (
    ("diffusion", DiffusionStepper),
    ("wave", WaveStepper),
    ("mix", MixStepper),
    ("light_wave", LightWaveStepper),
    ("light_wave_joint", JointLightWaveStepper),
    ("leapfrog", LeapfrogStepper),
)
for _name, _cls in BUILTIN_STEPPERS:
    register_stepper(_name, _cls)
del _name, _cls

__all__ = [
    "STEPPERS",
    "BUILTIN_STEPPERS",
    "Norm",
    "Stepper",
    "StepState",
    "LearnableLamStepper",
    "DiffusionStepper",
    "WaveStepper",
    "MixStepper",
    "LightWaveStepper",
    "JointLightWaveStepper",
    "LeapfrogStepper",
    "get_stepper",
    "make_stepper",
    "plugin_modules",
    "register_stepper",
    "stepper_options",
    "unregister_stepper",
]
