"""Public tf.data inputs re-sampled every epoch: record stores, dynamic pairs, coverage.

Import from here; the modules behind it hold one concept each:

* `run`: `open_run(uri) -> Run`, one handle for a materialized run or a pipeline's artifacts of
  it (what it recorded, its stores and indexes), and the typed `StoreOptions`;
* `record_store`: serialized records read by global record number (memory or disk backend),
  on `shard_readers` (frames read by offset: the Python reader, the memory backend's load),
  `native_reader` (the native op bound to a record set) and `shard_checks` (frame, offset
  index and shard checks, `RunPin`); `damaged_records`: what a damaged record is, how reported;
* `sources`: what users have (run directories, arrays, datasets, ids + loader) -> record stores;
  `labelled_sources`: the same with a class per record, and its class index;
  `element_codec`: the default element <-> Example encoding it uses;
* `parsing`: batched parsers of image Examples and payload checks;
* `epoch_plan`: stateless per-epoch plans and the datasets that re-plan every epoch;
  `epoch_state`: the checkpointable sampler state; `worker_slices`: how batches split over
  workers and replicas; `skip_log`: the count and log of samples skipped as damaged;
  `epoch_sampler`: what both samplers share (datasets of batches, here or on tf.data service);
  `variables`: the non-trainable variables indexes live in; `arguments`: argument checks;
  `data_service`: what a dataset needs to run on tf.data service workers, checked at build;
* `valid_pairs`, `group_pairs`, `pair_plan`, `pairs`, `coverage`: the valid-pair index (edges,
  or groups), the pair plan, the dynamic-pairs sampler, pair coverage;
* `class_report`, `class_plan`, `class_fillers`, `class_balanced`: which classes a plan uses, the
  class-balanced plan, the classes that complete its short batches, and the sampler that reads
  it;
  `run_mix`, `mix_plan`, `mixed_class_balanced`: several runs with a weight each, their
  class-balanced plan (classes namespaced by run) and the sampler that reads it;
  `mixed_pairs`: dynamic pairs over several pairs runs (x, y and valid pairs concatenated);
  `draw_counts`: how often each record was drawn, this epoch and so far; `summaries`: the
  callbacks' TensorBoard writers; `keras_inputs`: batches as the `(inputs, targets)` tuples
  Keras 3's `fit` takes, on any of its backends;
* `audio_config`: how audio records become features (`AudioFeatureConfig`, `SpecAugment`);
  `audio_features`: crop/pad, log-mel and SpecAugment in the graph;
  `speaker_augment`: noise, reverberation and speed perturbation (new classes) in the graph,
  replayed exactly on a resume (`SpeakerAugmentConfig`, `AdditiveNoise`, `Reverberation`),
  on `augment_signals` (its batched signal ops); `augment_images`: its TensorBoard images.

None of them imports TFX.
"""

from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig, SpecAugment
from tfx_dynamic_inputs.inputs.class_balanced import ClassBalancedSampler, class_balanced
from tfx_dynamic_inputs.inputs.class_plan import ClassBalancedPlan
from tfx_dynamic_inputs.inputs.class_report import ClassReport
from tfx_dynamic_inputs.inputs.coverage import PairCoverage, PairCoverageCallback
from tfx_dynamic_inputs.inputs.damaged_records import DamagedRecord, DamagedRecordError
from tfx_dynamic_inputs.inputs.data_service import ServiceUnsupportedError
from tfx_dynamic_inputs.inputs.draw_counts import DrawCounts, DrawCountsCallback
from tfx_dynamic_inputs.inputs.element_codec import tensor_parser
from tfx_dynamic_inputs.inputs.epoch_state import EpochState
from tfx_dynamic_inputs.inputs.group_pairs import GroupPairs
from tfx_dynamic_inputs.inputs.keras_inputs import keras_inputs
from tfx_dynamic_inputs.inputs.mix_plan import MixedClassPlan
from tfx_dynamic_inputs.inputs.mixed_class_balanced import MixedClassBalancedSampler, MixState
from tfx_dynamic_inputs.inputs.mixed_pairs import MixedPairCoverage, MixedPairsSampler
from tfx_dynamic_inputs.inputs.pair_plan import PairingState
from tfx_dynamic_inputs.inputs.pairs import (
    DynamicPairsSampler,
    dynamic_pairs,
    open_pairs_run,
)
from tfx_dynamic_inputs.inputs.parsing import ImageSpec, example_check, image_example_parser
from tfx_dynamic_inputs.inputs.record_store import RecordStore
from tfx_dynamic_inputs.inputs.run import Run, StoreOptions, open_run
from tfx_dynamic_inputs.inputs.run_mix import MixWeighting, RunMix, WeightedRun
from tfx_dynamic_inputs.inputs.sources import record_store_from
from tfx_dynamic_inputs.inputs.speaker_augment import (
    AdditiveNoise,
    Reverberation,
    SpeakerAugmentConfig,
)
from tfx_dynamic_inputs.inputs.valid_pairs import ValidPairs

__all__ = [
    "AdditiveNoise",
    "Reverberation",
    "SpeakerAugmentConfig",
    "AudioFeatureConfig",
    "ClassBalancedPlan",
    "ClassBalancedSampler",
    "ClassReport",
    "SpecAugment",
    "DamagedRecord",
    "DamagedRecordError",
    "DrawCounts",
    "DrawCountsCallback",
    "DynamicPairsSampler",
    "EpochState",
    "GroupPairs",
    "ImageSpec",
    "MixState",
    "MixWeighting",
    "MixedClassBalancedSampler",
    "MixedClassPlan",
    "MixedPairCoverage",
    "MixedPairsSampler",
    "PairCoverage",
    "PairCoverageCallback",
    "PairingState",
    "RecordStore",
    "Run",
    "RunMix",
    "ServiceUnsupportedError",
    "StoreOptions",
    "ValidPairs",
    "WeightedRun",
    "class_balanced",
    "dynamic_pairs",
    "example_check",
    "image_example_parser",
    "keras_inputs",
    "open_pairs_run",
    "open_run",
    "record_store_from",
    "tensor_parser",
]
