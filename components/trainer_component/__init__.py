"""The trainer components: dynamic pairs (`PairsTrainer`) or class-balanced batches
(`ClassBalancedTrainer`) -> a user module's `run_fn`."""

from components.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("tfx", "components.trainer_component")
from components.trainer_component.component import (
    ClassBalancedTrainer,
    ClassBalancedTrainerSpec,
    PairsTrainer,
    PairsTrainerSpec,
)
from components.trainer_component.fn_args import FnArgs
from components.trainer_component.input_options import (
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
