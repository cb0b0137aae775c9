"""Beam-backed TFX components that materialize raw inputs into Examples + index artifacts."""

from tfx_dynamic_inputs.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("tfx", "tfx_dynamic_inputs.materialize_component")
from tfx_dynamic_inputs.materialize_component.component import (
    MaterializeAudio,
    MaterializeAudioSpec,
    MaterializePairs,
    MaterializePairsSpec,
)

__all__ = ["MaterializeAudio", "MaterializeAudioSpec", "MaterializePairs", "MaterializePairsSpec"]
