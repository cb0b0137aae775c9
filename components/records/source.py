"""A record set of a committed run as a Grain `RandomAccessDataSource`, without TensorFlow.

Grain's protocol is duck-typed (`__len__`, `__getitem__`, picklable into its worker processes),
so nothing here imports `grain`: `grain.MapDataset.source(RunRecordSource(...))` and
`grain.DataLoader(data_source=RunRecordSource(...), ...)` take it as it is.

Each record is read by `RunRecords` (one pread of its index row and one of its frame, the frame
checked); a batch (`__getitems__`: the name PyTorch's `DataLoader` and ArrayRecord's source use,
and `_getitems`, the one Grain's `SourceMapDataset` calls) by `RunRecords.read_each`, its files
checked once and its rows and frames read in file order, as reading one by one would read them.
Records are decoded by the decoder `DECODERS` names, from the run's `summary.json`
(`decode="auto"`) or as asked: "audio" (`AudioDecoder` at the run's rate), "image"
(`ImageDecoder`), "bytes" (the payload as it is), or a decoder given (any `ExampleDecoder`).

Example:

    source = RunRecordSource("runs/speakers", "train")
    len(source), source[0]["audio"]  # N, int16 [n]
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.records.features import (
    AudioDecoder,
    ExampleDecoder,
    ExampleError,
    ImageDecoder,
    Value,
)
from tfx_dynamic_inputs.records.run_records import RunRecords

DECODERS = ("auto", "audio", "image", "bytes")

# The decoder `decode="auto"` picks for each job `summary.json` names.
_DECODER_OF_JOB = {"audio": "audio", "pairs": "image"}


@dataclasses.dataclass(frozen=True)
class _Bytes:
    """The "bytes" decoder: a record is its payload."""

    def __call__(self, payload: bytes) -> bytes:
        return payload


Decoder = AudioDecoder | ImageDecoder | ExampleDecoder | _Bytes
# The decoders a caller may pass as they are.
_GIVEN_DECODERS = (AudioDecoder, ImageDecoder, ExampleDecoder)


class RunRecordSource:
    """The records of one record set of a committed run, decoded, by record number.

    Args:
      run_dir: the run folder (local).
      record_set: the record set's name, e.g. "train" or "x".
      decode: "auto" (by the job `summary.json` names: "audio" for the audio job, "image" for
        the pairs job), "audio", "image", "bytes", or a decoder (`AudioDecoder`,
        `ImageDecoder`, `ExampleDecoder`).
      verify_crc: check each frame's masked CRC32Cs.
      on_damaged: "fail" (a damaged record, by its frame or by its payload, raises
        `DamagedRecordError` naming it, its shard, offset and run) or "skip" (it reads as
        None, for a filter to drop, and is listed in `damaged_records`).

    Raises:
      TypeError, ValueError: an argument of another type or value; "auto" for a run whose
        job is neither, "audio" for a run that recorded no sample rate.
      FileNotFoundError, layout.IndexFileError, layout.RunCommitError: as `RunRecords`.

    Example:

        import grain
        source = RunRecordSource("runs/speakers", "train")
        dataset = grain.MapDataset.source(source).shuffle(seed=0).batch(32)
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        record_set: str,
        *,
        decode: str | AudioDecoder | ImageDecoder | ExampleDecoder = "auto",
        verify_crc: bool = True,
        on_damaged: str = "fail",
    ):
        if not isinstance(decode, _GIVEN_DECODERS) and decode not in DECODERS:
            raise ValueError(
                f"decode must be one of {DECODERS} or a decoder (AudioDecoder, ImageDecoder, "
                f"ExampleDecoder), got {decode!r:.100}"
            )
        self._records = RunRecords(
            run_dir, record_set, verify_crc=verify_crc, on_damaged=on_damaged
        )
        self._decode = _decoder(decode, self._records)

    @property
    def records(self) -> RunRecords:
        """The reader of the payloads (run id, summary, damaged records, `check_run`)."""
        return self._records

    @property
    def decoder(self) -> Decoder:
        """What turns a payload into a record."""
        return self._decode

    def __len__(self) -> int:
        return self._records.num_records

    def __getitem__(self, index: int) -> dict[str, Value] | bytes | None:
        """Record `index`, decoded.

        Args:
          index: a record number in [0, len(self)) (Grain's record key).

        Returns:
          The decoded record (feature name -> value), or the payload for "bytes"; None for a
          damaged record under `on_damaged="skip"`.

        Raises:
          TypeError, IndexError, DamagedRecordError, layout.RunCommitError: as
            `RunRecords.read`; a payload that is not an Example of the decoder's features is
            a damaged record.
        """
        return self._decoded(index, self._records.read(index))

    def __getitems__(
        self, indices: Sequence[int] | np.ndarray
    ) -> list[dict[str, Value] | bytes | None]:
        """Records `indices`, decoded: `[self[i] for i in indices]`, read as one batch
        (`RunRecords.read_each`), each decoded as it comes.

        Args:
          indices: record numbers (a sequence of ints or NumPy integers, or a 1-D integer
            array), in any order, repeats allowed.

        Returns:
          The records in the order given; None for each damaged record under
          `on_damaged="skip"`.

        Raises:
          TypeError, IndexError, DamagedRecordError, layout.RunCommitError: the first that
            `[self[i] for i in indices]` would raise (a payload that is no Example of the
            decoder's features raises in its place in the order).

        Example:
          source.__getitems__([4, 1, 4])  # [source[4], source[1], source[4]], read at once
        """
        payloads = self._records.read_each(indices)
        return [
            self._decoded(index, payload) for index, payload in zip(indices, payloads, strict=True)
        ]

    # Grain's name for a batched read: its `SourceMapDataset._getitems` calls a source's
    # `_getitems` where there is one. (Grain 0.2.18's `MapDataset.batch` still reads its
    # parent one by one: its pushdown to `_getitems` is an experiment, off.)
    _getitems = __getitems__

    def _decoded(self, index: int, payload: bytes | None) -> dict[str, Value] | bytes | None:
        """`payload` decoded; None for a damaged record (reported) under "skip"."""
        if payload is None:
            return None
        try:
            return self._decode(payload)
        except ExampleError as error:
            self._records.damaged(index, str(error))
            return None

    def __repr__(self) -> str:
        return f"RunRecordSource({self._records!r}, decoder={self._decode!r})"


def _decoder(decode: str | Decoder, records: RunRecords) -> Decoder:
    if isinstance(decode, _GIVEN_DECODERS):
        return decode
    summary = records.summary
    if decode == "auto":
        job = summary.get("job")
        if job not in _DECODER_OF_JOB:
            raise ValueError(
                f"run {records.run_id} at {records.run_dir} was written by job {job!r:.100}, "
                "whose records decode='auto' does not know; pass decode='audio', 'image', "
                "'bytes' or a decoder"
            )
        decode = _DECODER_OF_JOB[job]
    if decode == "bytes":
        return _Bytes()
    if decode == "image":
        return ImageDecoder()
    sample_rate = (summary.get("config") or {}).get("sample_rate")
    if sample_rate is None:
        raise ValueError(
            f"{os.path.join(records.run_dir, layout.SUMMARY_FILE)} records no config.sample_rate:"
            " not a run of the audio job, whose records decode='audio' reads"
        )
    return AudioDecoder(sample_rate)
