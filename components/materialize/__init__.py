"""Beam materialization: raw images + pair lists, or speaker audio -> indexed TFRecord shards.

    from components.materialize import PairsConfig, AudioConfig, run_pairs, run_audio
    summary = run_pairs(PairsConfig(x_dir=..., y_dir=..., pairs=..., output_dir=...))

The on-disk result follows `components.layout`; `python -m components.materialize --help`
describes the flags.
"""

from components.materialize.audio_pipeline import build_audio_pipeline, run_audio
from components.materialize.config import AudioConfig, PairsConfig, ShardingConfig
from components.materialize.errors import MaterializeError
from components.materialize.pairs_pipeline import build_pairs_pipeline, run_pairs

__all__ = [
    "AudioConfig",
    "MaterializeError",
    "PairsConfig",
    "ShardingConfig",
    "build_audio_pipeline",
    "build_pairs_pipeline",
    "run_audio",
    "run_pairs",
]
