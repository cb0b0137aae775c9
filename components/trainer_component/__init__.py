"""The trainer component (dynamic-pair or class-balanced inputs -> a user module's `run_fn`)."""

from components.trainer_component.component import ResampledTrainer, ResampledTrainerSpec
from components.trainer_component.fn_args import FnArgs
from components.trainer_component.input_options import (
    ClassBalancedInputOptions,
    PairsInputOptions,
)

__all__ = [
    "ClassBalancedInputOptions",
    "FnArgs",
    "PairsInputOptions",
    "ResampledTrainer",
    "ResampledTrainerSpec",
]
