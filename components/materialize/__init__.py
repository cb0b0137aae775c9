"""Beam materialization: raw images + pair lists, or speaker audio -> indexed TFRecord shards.

    from tfx_dynamic_inputs.materialize import PairsConfig, AudioConfig, run_pairs, run_audio
    summary = run_pairs(PairsConfig(x_dir=..., y_dir=..., pairs=..., output_dir=...))

The on-disk result follows `tfx_dynamic_inputs.layout`; `python -m tfx_dynamic_inputs.materialize
--help` describes the flags.
"""

from tfx_dynamic_inputs.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("beam", "tfx_dynamic_inputs.materialize")
from tfx_dynamic_inputs.materialize.lazy_exports import resolver

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
__getattr__ = resolver(__name__, _EXPORTS)
