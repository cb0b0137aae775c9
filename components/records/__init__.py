"""A committed run's records read without TensorFlow: for Grain, JAX and PyTorch.

Importing this package (or opening and reading a run with it) never imports TensorFlow: the
run is checked as the TensorFlow readers check it, by the same functions (`layout`'s readers
inside `layout.filesystem.without_tensorflow()`, and the checks here that the record store
shares), read with `os.pread`, and its `tf.train.Example`s parsed with protobuf messages of our
own.

* `source`: `RunRecordSource`, a record set as a Grain `RandomAccessDataSource`;
* `run_records`: `RunRecords`, the payloads by record number, one run from open to close;
* `features`: `FixedFeature` / `ExampleDecoder` (Example -> NumPy), `AudioDecoder`,
  `ImageDecoder`; `example_pb2`: the `tf.train.Example` messages;
* `frames`: TFRecord frames read back and checked; `index_checks`: an offset index and shards
  checked at open, and `RunPin`; `index_rows`: its rows read by record number, one or a
  batch's; `damage`: `DamagedRecord`, `DamagedRecordError`.

Example:

    from tfx_dynamic_inputs.records import RunRecordSource
    source = RunRecordSource("runs/speakers", "train")   # decode="auto": by the run's job
    record = source[0]  # {"audio": int16 [n], "sample_rate": ..., "label": ..., "id": b"..."}
"""

from __future__ import annotations

from tfx_dynamic_inputs.records.damage import DamagedRecord, DamagedRecordError
from tfx_dynamic_inputs.records.features import (
    AudioDecoder,
    ExampleDecoder,
    ExampleError,
    FixedFeature,
    ImageDecoder,
)
from tfx_dynamic_inputs.records.run_records import RunRecords
from tfx_dynamic_inputs.records.source import DECODERS, RunRecordSource

__all__ = [
    "DECODERS",
    "AudioDecoder",
    "DamagedRecord",
    "DamagedRecordError",
    "ExampleDecoder",
    "ExampleError",
    "FixedFeature",
    "ImageDecoder",
    "RunRecordSource",
    "RunRecords",
]
