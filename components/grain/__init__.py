"""The samplers' batches as Grain datasets, without TensorFlow: for Keras 3 on JAX or PyTorch.

The same plans as the tf.data samplers (`tfx_dynamic_inputs.plans`, bit for bit) over arrays,
any random-access source or a committed run (`tfx_dynamic_inputs.records`), so a batch of epoch
`e` here equals the tf.data batch of epoch `e` of the same arguments. Needs the `grain` extra;
importing it never imports TensorFlow.

* `pairs`: `dynamic_pairs`, `GrainPairs`; `valid_pairs`: `EdgeList`, `GroupList`;
  `run_pairs`: `open_pairs`, a pairs run's record sets and pair index;
* `class_balanced`: `class_balanced`, `GrainClassBalanced` (the records, decoded, or the audio
  front end's features, with speaker augmentation: `audio_batches.AudioBatches`);
* `mixed_pairs`, `mixed_class_balanced`: the mixed samplers over several run folders
  (`plans.run_mix.FolderMix`), read through `mixed_runs.ConcatenatedRecords`;
* `epoch_stream`: `PlannedBatches`, the samplers' base (plans `PLAN_BLOCK` batches a call), an
  epoch as a `grain.MapDataset`, the epochs as a checkpointable, elastic `grain.IterDataset`;
  `batch_reads`: records by number, stacked (a source's batched `__getitems__` where it has one);
  `skipped`: samples left out for damaged records (`on_damaged="skip"`).

Example:

    from tfx_dynamic_inputs.grain import dynamic_pairs
    stream = dynamic_pairs(x, y, valid_pairs, batch_size=32, seed=7, num_epochs=10)
    iterator = iter(stream)
    batch = next(iterator); state = iterator.get_state()   # resume: iterator.set_state(state)
"""

from __future__ import annotations

from tfx_dynamic_inputs.grain.batch_reads import BatchReader
from tfx_dynamic_inputs.grain.class_balanced import GrainClassBalanced, class_balanced
from tfx_dynamic_inputs.grain.epoch_stream import EpochStream, epoch_dataset
from tfx_dynamic_inputs.grain.mixed_class_balanced import (
    GrainMixedClassBalanced,
    mixed_class_balanced,
)
from tfx_dynamic_inputs.grain.mixed_pairs import GrainMixedPairs, mixed_pairs
from tfx_dynamic_inputs.grain.mixed_runs import ConcatenatedRecords
from tfx_dynamic_inputs.grain.pairs import GrainPairs, dynamic_pairs
from tfx_dynamic_inputs.grain.run_pairs import open_pairs
from tfx_dynamic_inputs.grain.valid_pairs import EdgeList, GroupList
from tfx_dynamic_inputs.plans.run_mix import FolderMix, WeightedFolder

__all__ = [
    "BatchReader",
    "ConcatenatedRecords",
    "EdgeList",
    "EpochStream",
    "FolderMix",
    "GrainClassBalanced",
    "GrainMixedClassBalanced",
    "GrainMixedPairs",
    "GrainPairs",
    "GroupList",
    "WeightedFolder",
    "class_balanced",
    "dynamic_pairs",
    "epoch_dataset",
    "mixed_class_balanced",
    "mixed_pairs",
    "open_pairs",
]
