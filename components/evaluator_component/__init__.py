"""The evaluator component (`ModelGate`: held-out metric vs the latest blessed model ->
a standard `ModelBlessing` for the standard Pusher)."""

from tfx_dynamic_inputs.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("tfx", "tfx_dynamic_inputs.evaluator_component")
from tfx_dynamic_inputs.evaluator_component.component import ModelGate, ModelGateSpec

__all__ = ["ModelGate", "ModelGateSpec"]
