"""The trainer components: dynamic pairs (`PairsTrainer`) or class-balanced batches
(`ClassBalancedTrainer`) -> a user module's `run_fn`."""

from tfx_dynamic_inputs.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("tfx", "tfx_dynamic_inputs.trainer_component")
from tfx_dynamic_inputs.trainer_component.component import (
    ClassBalancedTrainer,
    ClassBalancedTrainerSpec,
    PairsTrainer,
    PairsTrainerSpec,
)
from tfx_dynamic_inputs.trainer_component.fn_args import FnArgs
from tfx_dynamic_inputs.trainer_component.input_options import (
    ClassBalancedInputOptions,
    PairsInputOptions,
)

__all__ = [
    "ClassBalancedInputOptions",
    "ClassBalancedTrainer",
    "ClassBalancedTrainerSpec",
    "FnArgs",
    "PairsInputOptions",
    "PairsTrainer",
    "PairsTrainerSpec",
]
