"""Beam materialization: raw images + pair lists, or speaker audio -> indexed TFRecord shards.

    from components.materialize import PairsConfig, AudioConfig, run_pairs, run_audio
    summary = run_pairs(PairsConfig(x_dir=..., y_dir=..., pairs=..., output_dir=...))

The on-disk result follows `components.layout`; `python -m components.materialize --help`
describes the flags.
"""

import importlib

# Exports resolve on first use: a Beam worker unpickling a DoFn imports this package, and the
# workers of one job must not pay for the other job's imports (PyAV, libsndfile, soxr; Pillow).
_EXPORTS = {
    "AudioConfig": "config",
    "MaterializeAudio": "audio_pipeline",
    "MaterializeError": "errors",
    "MaterializePairs": "pairs_pipeline",
    "PairsConfig": "config",
    "ShardingConfig": "config",
    "run_audio": "audio_pipeline",
    "run_pairs": "pairs_pipeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
