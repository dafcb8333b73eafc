r"""The residual step and the joint LayerNorm after it, compiled together by
``torch.compile`` (``step_impl="compile"``).

Every layer of :class:`~wavygraph.nn.WavyDIFFormer` ends with
``norm(*stepper(state, force))``: a handful of element-wise ops and a
row-wise normalisation over ``(N, C)`` arrays. Eager PyTorch runs each op as
its own pass through memory, forward and backward. ``torch.compile``
(Inductor: C++/OpenMP on CPU, Triton on GPU) generates a couple of kernels
each way for the step and the norm together.
:meth:`wavygraph.nn.Stepper.step_and_norm` calls into this module when
``impl="compile"`` (opt-in: see ``docs/benchmarks.md`` for what it gains and
costs), so every kind, also one registered from outside the package, is
compiled from its own pure :meth:`~wavygraph.nn.Stepper.update`. (The
hand-written autograd functions of ``light_wave`` and ``light_wave_joint``
are the eager fast path, beside their kinds.)

A failing compile (no C++ compiler, an unsupported platform) raises
:class:`StepCompileError`, which names the way out (``step_impl="eager"``).
Under autocast and for mixed dtypes the eager ops run; inside an outer
``torch.compile`` of the model the plain ops are traced (the outer compile
generates the kernels itself). Compiled and eager results agree to float
rounding (tested).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..joint_norm import JointLayerNorm, joint_layer_norm, needs_plain_ops

STEP_IMPLS = ("eager", "compile")


class StepCompileError(RuntimeError):
    """``torch.compile`` of the step and norm failed (toolchain or platform)."""


_compiled: dict[tuple, object] = {}


def is_compiling() -> bool:
    """True inside an outer ``torch.compile`` trace."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return compiler.is_compiling()
    return torch._dynamo.is_compiling()  # pragma: no cover (torch < 2.3)


def use_compiled(impl: str, state, force: Tensor, norm: JointLayerNorm) -> bool:
    """Whether :func:`step_and_norm` should run: inside an outer compile
    (plain ops traced), or ``impl == "compile"`` outside autocast with one dtype."""
    return is_compiling() or (impl == "compile" and not needs_plain_ops(state.x, state.v, force, norm.weight))


def _step_and_norm(update, joint: bool, x, v, force, lam, weight, bias, tau: float, eps: float):
    x, v = update(x, v, force, tau, lam)
    if joint:
        return joint_layer_norm(x, v, weight, bias, eps)
    return joint_layer_norm(x, None, weight, bias, eps)[0], v


def _compiled_for(kind: type, joint: bool):
    key = (kind, joint)
    fn = _compiled.get(key)
    if fn is None:
        update = kind.update

        # one function object per kind, so each kind has its own compile cache
        def step_and_norm(x, v, force, lam, weight, bias, tau, eps):
            return _step_and_norm(update, joint, x, v, force, lam, weight, bias, tau, eps)

        step_and_norm.__qualname__ = f"step_and_norm[{kind.__name__}]"
        fn = _compiled[key] = torch.compile(step_and_norm, dynamic=True)
    return fn


def step_and_norm(stepper, norm: JointLayerNorm, state, force: Tensor) -> tuple[Tensor, Tensor | None]:
    """``stepper.step_and_norm(state, force, norm)`` through ``torch.compile``
    (or traced plain ops inside an outer compile); returns ``(x', v')``."""
    x, v = state
    joint = stepper.second_order and stepper.v_is_derivative
    args = (x, v, force, stepper.lam_or_none(force.dtype), norm.weight, norm.bias, stepper.tau, norm.eps)
    if is_compiling():  # an outer torch.compile traces the plain ops and compiles them itself
        return _step_and_norm(type(stepper).update, joint, *args)
    try:
        return _compiled_for(type(stepper), joint)(*args)
    except torch._dynamo.exc.TorchDynamoException as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise StepCompileError(
            f"torch.compile of the {type(stepper).__name__} step failed ({first}); "
            "use step_impl='eager' (config: model.step_impl=eager), which computes the same"
        ) from err
