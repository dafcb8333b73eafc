"""PyG-style modules: all-pair attention, residual steppers, joint
(state, velocity) LayerNorm and FFN, and the WavyDIFFormer model."""
from . import functional
from .conv import DIFFormerConv
from .graph import gcn_adjacency
from .joint_ffn import JointFFN
from .joint_norm import JointBatchNorm, JointLayerNorm
from .model import WavyDIFFormer
from .model_args import DIFFORMER_ARGS, RECIPE_ARGS, ModelArgs
from .steppers import (
    STEPPERS,
    DiffusionStepper,
    JointLightWaveStepper,
    LeapfrogStepper,
    LearnableLamStepper,
    LightWaveStepper,
    MixStepper,
    StepState,
    Stepper,
    WaveStepper,
    make_stepper,
    register_stepper,
    unregister_stepper,
)

__all__ = [
    "functional",
    "DIFFormerConv",
    "gcn_adjacency",
    "JointFFN",
    "JointBatchNorm",
    "JointLayerNorm",
    "WavyDIFFormer",
    "ModelArgs",
    "DIFFORMER_ARGS",
    "RECIPE_ARGS",
    "STEPPERS",
    "Stepper",
    "StepState",
    "DiffusionStepper",
    "WaveStepper",
    "MixStepper",
    "LightWaveStepper",
    "JointLightWaveStepper",
    "LeapfrogStepper",
    "LearnableLamStepper",
    "make_stepper",
    "register_stepper",
    "unregister_stepper",
]
