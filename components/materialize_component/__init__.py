"""Beam-backed TFX components that materialize raw inputs into Examples + index artifacts."""

from components.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("tfx", "components.materialize_component")
from components.materialize_component.component import (
    MaterializeAudio,
    MaterializeAudioSpec,
    MaterializePairs,
    MaterializePairsSpec,
)

__all__ = ["MaterializeAudio", "MaterializeAudioSpec", "MaterializePairs", "MaterializePairsSpec"]
