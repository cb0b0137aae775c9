"""Public tf.data inputs re-sampled every epoch: record stores, dynamic pairs, coverage.

Import from here; the modules behind it hold one concept each.
"""

from components.inputs.audio_features import AudioFeatureConfig, SpecAugment
from components.inputs.class_balanced import (
    ClassBalancedPlan,
    ClassBalancedSampler,
    ClassReport,
    class_balanced,
)
from components.inputs.coverage import PairCoverage, PairCoverageCallback
from components.inputs.epoch_plan import EpochState
from components.inputs.pairs import (
    PairingState,
    ValidPairs,
    dynamic_pairs,
    dynamic_pairs_from_run,
    open_pairs_run,
)
from components.inputs.parsing import ImageSpec, example_check, image_example_parser
from components.inputs.record_store import DamagedRecord, DamagedRecordError, RecordStore
from components.inputs.sources import record_store_from, tensor_parser

__all__ = [
    "AudioFeatureConfig",
    "ClassBalancedPlan",
    "ClassBalancedSampler",
    "ClassReport",
    "SpecAugment",
    "DamagedRecord",
    "DamagedRecordError",
    "EpochState",
    "ImageSpec",
    "PairCoverage",
    "PairCoverageCallback",
    "PairingState",
    "RecordStore",
    "ValidPairs",
    "class_balanced",
    "dynamic_pairs",
    "dynamic_pairs_from_run",
    "example_check",
    "image_example_parser",
    "open_pairs_run",
    "record_store_from",
    "tensor_parser",
]
