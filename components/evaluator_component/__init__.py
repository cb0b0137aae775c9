"""The evaluator component (`ModelGate`: held-out metric vs the latest blessed model ->
a standard `ModelBlessing` for the standard Pusher)."""

from components.evaluator_component.component import ModelGate, ModelGateSpec

__all__ = ["ModelGate", "ModelGateSpec"]
