"""Beam-backed TFX components that materialize raw inputs into Examples + index artifacts."""

from components.materialize_component.component import (
    MaterializeAudio,
    MaterializeAudioSpec,
    MaterializePairs,
    MaterializePairsSpec,
)

__all__ = ["MaterializeAudio", "MaterializeAudioSpec", "MaterializePairs", "MaterializePairsSpec"]
