"""How a model's layers are run: the memory modes of
:class:`~wavygraph.nn.WavyDIFFormer`, applied from outside its layers.

Its three arguments (checked by :func:`~wavygraph.nn.model_args.check_model_args`):

* ``gradient_checkpointing`` (bool): in training with autograd on, keep only
  the input state of each segment of layers and recompute the segment in
  backward (the last segment is not recomputed); same gradients, about one
  more forward pass. (default: :obj:`False`)
* ``checkpoint_segments`` (int, optional): the number of segments;
  :obj:`None` takes ``ceil(sqrt(num_layers))``. Only with
  ``gradient_checkpointing=True``. (default: :obj:`None`)
* ``reversible`` (bool): in training with autograd on, compute the
  gradients by inverting the steps, storing no layer's state; only for the
  kinds with an inverse (``leapfrog``), and not with
  ``gradient_checkpointing`` (which it makes useless). With
  ``return_hidden=True`` the hidden states carry their gradients.
  (default: :obj:`False`)

``forward(..., layer_hook=fn)`` of the model calls ``fn(i, x_i)`` after
every layer in every mode (during the forward pass, never in a
recomputation).

=========================== ============================================== =====================================
mode                        what autograd keeps                            module
=========================== ============================================== =====================================
plain (default)             every layer's tensors                          :mod:`~wavygraph.nn.sequential`
``gradient_checkpointing``  the input state of each segment of layers      :mod:`~wavygraph.nn.checkpointing`
``reversible``              the last state only (invertible kinds)         :mod:`~wavygraph.nn.reversible`
=========================== ============================================== =====================================

The checkpointed and reversible modes act in training with autograd on;
evaluation and ``torch.no_grad()`` run the plain loop. Each mode takes the
sequence of layers and uses only their call, their parameters and (the
reversible one) their inverse, so a sub-module added to a layer needs no
change here.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from .checkpointing import run_checkpointed
from .layer import LayerContext
from .reversible import run_reversible
from .sequential import Hook, Total, run_layers
from .steppers import StepState


#: The model arguments that set the memory mode, in the order :meth:`MemoryModes.set_memory_mode` takes them.
MEMORY_KEYS = ("gradient_checkpointing", "checkpoint_segments", "reversible")


class MemoryModes:
    """A mixin for an :class:`~torch.nn.Module` whose layers run in one of
    the memory modes; its attributes ``gradient_checkpointing``,
    ``checkpoint_segments`` and ``reversible`` pick the mode at every call
    (they may be changed between calls)."""

    gradient_checkpointing: bool = False
    checkpoint_segments: int | None = None
    reversible: bool = False

    def set_memory_mode(self, gradient_checkpointing: bool = False, checkpoint_segments: int | None = None,
                        reversible: bool = False) -> None:
        """Set the memory mode (checked by :class:`~wavygraph.nn.model_args.ModelArgs`)."""
        self.gradient_checkpointing = gradient_checkpointing
        self.checkpoint_segments = checkpoint_segments
        self.reversible = reversible

    def run_layers(self, layers: Sequence[nn.Module], state: StepState, ctx: LayerContext, hook: Hook = None,
                   hidden: list | None = None, total: Total | None = None) -> StepState:
        """``layers`` from ``state`` in the mode set; ``hook(i, x_i)`` after
        every layer ``i = 1..L``, the states appended to ``hidden`` and summed
        into ``total`` (when given), in every mode."""
        if self.training and torch.is_grad_enabled():
            if self.reversible:
                return run_reversible(layers, state, ctx, hook, hidden, total)
            if self.gradient_checkpointing:
                return run_checkpointed(layers, state, ctx, self.checkpoint_segments, hook, hidden, total)
        return run_layers(layers, state, ctx, hook, hidden, total=total)
