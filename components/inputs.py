"""Public tf.data inputs re-sampled every epoch: record stores, dynamic pairs, coverage.

Import from here; the modules behind it hold one concept each.
"""

from components.audio_features import AudioFeatureConfig, SpecAugment
from components.class_balanced import (
    ClassBalancedPlan,
    ClassBalancedSampler,
    ClassReport,
    class_balanced,
)
from components.coverage import PairCoverage, PairCoverageCallback
from components.epoch_plan import EpochState
from components.pairs import (
    PairingState,
    ValidPairs,
    dynamic_pairs,
    dynamic_pairs_from_run,
    open_pairs_run,
)
from components.parsing import ImageSpec, example_check, image_example_parser
from components.record_store import DamagedRecord, DamagedRecordError, RecordStore
from components.sources import record_store_from, tensor_parser

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
