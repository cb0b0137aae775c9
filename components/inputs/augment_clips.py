"""The noise clips and RIRs of the speaker augmentation: checked once at open, gathered by window.

`ClipBank.open` reads a run's clips a bounded group of records at a time (the disk reader, CRCs
checked) and measures each in chunks, so opening holds at most one group, never the run:

* **Silence.** A noise clip whose mean power is below `SILENCE_FLOOR_DB` dB re full scale, or a
  RIR whose used part (below) holds less energy than `SILENCE_FLOOR_DB` dB re a full-scale unit
  impulse, adds nothing (an all-zero RIR turns every segment into silence; a silent noise clip
  leaves the "noisy" segment clean, and a near-silent one is only amplified quantization). The
  floor, -80 dB, is about 3 int16 steps RMS (a +-1 step dither is -90 dB); recorded noise and
  RIRs are far above it. Such clips are left out, counted in `ClipReport` and said in one
  warning; a run with no other clip is refused in one line.
* **RIRs** keep only their first `max_samples` from the direct-path peak (the first largest |h|).

Per batch, `ClipBank.windows` gathers `width` samples of each drawn clip from a given offset, so
memory follows the batch (B x width samples), not the clips: a 3-hour noise clip costs its
windows, not a copy per sample. The kept samples are held once, as one int16 variable, when they
fit the memory budget; otherwise each window is read from the run's shards by offset (`os.pread`
in a `tf.numpy_function`, which a tf.data service worker cannot run: `service_problems`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import weakref

import numpy as np
import tensorflow as tf

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.inputs.run import Run, StoreOptions
from tfx_dynamic_inputs.inputs.variables import index_variable

# The levels are stated once, in NumPy, with the NumPy augmentation (plans.clip_levels).
from tfx_dynamic_inputs.plans.clip_levels import SILENCE_FLOOR_DB as SILENCE_FLOOR_DB
from tfx_dynamic_inputs.plans.clip_levels import direct_path_peak
from tfx_dynamic_inputs.plans.clip_levels import is_silent as is_silent

_log = logging.getLogger(__name__)

_FULL_SCALE = 32768.0
_GROUP_BYTES = 64 << 20  # records read at a time at open, by their payload bytes
_NAMED = 5  # silent record numbers named in the warning


@dataclasses.dataclass(frozen=True)
class ClipReport:
    """What opening a noise or RIR run found.

    Args:
      what: "noise" or "RIR".
      uri: the run.
      record_set: its record set of clips.
      num_clips: the clips in it.
      silent: the record numbers left out as silent (below `SILENCE_FLOOR_DB`).
      backend: "memory" (the kept samples in one variable) or "disk" (windows read by offset).
    """

    what: str
    uri: str
    record_set: str
    num_clips: int
    silent: tuple[int, ...]
    backend: str

    @property
    def num_used(self) -> int:
        """The clips drawn from."""
        return self.num_clips - len(self.silent)


class ClipBank:
    """The audible clips of a run, by window (see the module). Build it with `ClipBank.open`.

    Attributes:
      report: the `ClipReport`.
      num_clips: the clips drawn from (`report.num_used`).
      records: int64 [num_clips], the record number of each.
      longest: the most samples a kept clip has.
    """

    def __init__(self, report: ClipReport, records, lengths, memory_bank, locations):
        """Use `ClipBank.open`; this signature is internal."""
        self.report = report
        self.num_clips = len(records)
        self.records = tf.constant(records, tf.int64)
        self.longest = int(max(lengths))
        self._lengths = tf.constant(lengths, tf.int64)
        self._bank = None if memory_bank is None else index_variable(memory_bank, name="clips")
        self._starts = tf.constant(np.cumsum([0, *lengths[:-1]]), tf.int64)
        self._locations = locations
        self._fds: dict[str, int] = {}
        self._fds_lock = threading.Lock()

    @classmethod
    def open(
        cls,
        run: Run,
        record_set: str,
        what: str,
        options: StoreOptions,
        max_samples: int | None = None,
    ) -> ClipBank:
        """Reads and measures the clips of `record_set`; keeps the audible ones.

        Args:
          run: the noise or RIR run.
          record_set: its record set of clips (not empty).
          what: "noise" or "RIR", named in messages.
          options: the store options; `memory_budget_bytes` bounds the kept samples in memory.
          max_samples: a RIR's samples kept from its direct-path peak; None: whole clips (noise).

        Returns:
          The `ClipBank`.

        Raises:
          ValueError: every clip is silent, or a record holds no int16 PCM `audio` (one line
            naming the run and the record).
        """
        # Read once, here, by the Python reader: loading the native op would cost more (a fixed
        # ~65 MB) than this reads at a time, and the batches never read these records again.
        scan = dataclasses.replace(options, backend="disk", reader="python")
        store = run.store(record_set, scan)
        offsets_path = os.path.join(layout.index_dir(run.uri, record_set), layout.OFFSETS_FILE)
        payload_bytes = layout.load_npy(offsets_path, mmap=True, shape=(None, 3), dtype="<i8")
        records, lengths, locations, silent = [], [], [], []
        # The kept samples, written in place while they fit the budget (None past it: offsets
        # only); no clip is kept longer than its payload, so its bytes bound the buffer.
        budget = min(int(payload_bytes[:, 2].sum()), options.memory_budget_bytes)
        kept: np.ndarray | None = np.empty(budget // 2, np.int16)
        used = 0
        for group in _groups(np.asarray(payload_bytes[:, 2])):
            payloads = store.read(tf.constant(group, tf.int64)).numpy()
            for index, payload in zip(group, payloads, strict=True):
                start, count = _pcm_span(payload, what, run.uri, index)
                pcm = np.frombuffer(payload, "<i2", count, start)
                peak = 0 if max_samples is None else direct_path_peak(pcm)
                if max_samples is not None:
                    pcm = pcm[peak : peak + max_samples]
                if is_silent(pcm, per_sample=max_samples is None):
                    silent.append(index)
                    continue
                records.append(index)
                lengths.append(len(pcm))
                shard, frame = store.locate(index)
                locations.append((shard, frame + layout.FRAME_HEADER_BYTES + start + 2 * peak))
                if kept is not None and used + len(pcm) <= len(kept):
                    kept[used : used + len(pcm)] = pcm
                else:
                    kept = None
                used += len(pcm)
        backend = "disk" if kept is None else "memory"
        report = ClipReport(what, run.uri, record_set, len(payload_bytes), tuple(silent), backend)
        floor = f"{SILENCE_FLOOR_DB:g} dB"
        if not records:
            raise ValueError(
                f"the {what} run {run.uri}: all {report.num_clips} clips of record set "
                f"{record_set!r} are silent (below the {floor} floor of speaker_augment); give a "
                f"run of audible {what} clips"
            )
        if silent:
            _log.warning(
                "the %s run %s: %d of %d clips of record set %r are silent (below %s) and left "
                "out, records %s",
                what,
                run.uri,
                len(silent),
                report.num_clips,
                record_set,
                floor,
                ", ".join(map(str, silent[:_NAMED])) + (", ..." if len(silent) > _NAMED else ""),
            )
        return cls(report, records, lengths, None if kept is None else kept[:used], locations)

    def service_problems(self) -> list[str]:
        """Why a tf.data service worker cannot gather these windows (empty: it can)."""
        if self.report.backend == "memory":
            return []
        return [
            f"the {self.report.what} clips of {self.report.uri} exceed memory_budget_bytes and "
            "are read by os.pread in a tf.numpy_function; raise memory_budget_bytes above them"
        ]

    def lengths(self, clip: tf.Tensor) -> tf.Tensor:
        """int64 [B]: the samples of each clip `clip` (int64 [B], in [0, num_clips))."""
        return tf.gather(self._lengths, clip)

    def windows(self, clip: tf.Tensor, start: tf.Tensor, width: int, *, loop: bool) -> tf.Tensor:
        """Samples `start .. start + width - 1` of each clip, as audio_features decodes them.

        Args:
          clip: int64 [B] clips, in [0, num_clips).
          start: int64 [B] first samples (each below its clip's length).
          width: samples per window.
          loop: a clip shorter than its window repeats from its start (noise); else the window
            is zero past the clip's end (RIRs).

        Returns:
          float32 [B, width] in [-1, 1).
        """
        lengths = self.lengths(clip)[:, None]
        taken = start[:, None] + tf.range(width, dtype=tf.int64)[None, :]
        at = taken % lengths if loop else tf.minimum(taken, lengths - 1)
        if self._bank is not None:
            pcm = tf.gather(self._bank, tf.gather(self._starts, clip)[:, None] + at)
        else:
            pcm = tf.numpy_function(self._read_windows, [clip, at], tf.int16, stateful=False)
            pcm = tf.ensure_shape(pcm, [None, width])
        signal = tf.cast(pcm, tf.float32) / _FULL_SCALE
        return signal if loop else tf.where(taken < lengths, signal, 0.0)

    def _read_windows(self, clip: np.ndarray, at: np.ndarray) -> np.ndarray:
        """int16 [B, W]: sample `at[b, w]` of clip `clip[b]`, one `pread` of each row's span."""
        out = np.empty(at.shape, np.int16)
        for row, (c, where) in enumerate(zip(clip.tolist(), at, strict=True)):
            shard, offset = self._locations[c]
            low, high = int(where.min()), int(where.max()) + 1
            data = os.pread(self._descriptor(shard), 2 * (high - low), offset + 2 * low)
            out[row] = np.frombuffer(data, "<i2")[where - low]
        return out

    def _descriptor(self, shard: str) -> int:
        with self._fds_lock:
            if shard not in self._fds:
                self._fds[shard] = os.open(shard, os.O_RDONLY)
                weakref.finalize(self, os.close, self._fds[shard])
            return self._fds[shard]


def _groups(payload_bytes: np.ndarray) -> list[list[int]]:
    """Record numbers in consecutive groups of at most `_GROUP_BYTES` (one record at least)."""
    groups, group, size = [], [], 0
    for index, length in enumerate(payload_bytes.tolist()):
        if group and size + length > _GROUP_BYTES:
            groups.append(group)
            group, size = [], 0
        group.append(index)
        size += length
    return groups + [group] if group else groups


def _pcm_span(payload: bytes, what: str, uri: str, index: int) -> tuple[int, int]:
    """(byte offset, samples) of the `audio` bytes inside a serialized `tf.train.Example`.

    Walks the protobuf wire format (Example.features -> map entry -> Feature.bytes_list ->
    value) without copying the audio, so that its offset in the shard is known too.
    """
    key = layout.AUDIO_KEY.encode()
    try:
        for _, begin, end in _fields(payload, 0, len(payload), wanted=1):  # Example.features
            for _, entry, entry_end in _fields(payload, begin, end, wanted=1):  # map entries
                fields = {f: (a, b) for f, a, b in _fields(payload, entry, entry_end)}
                name, value = fields.get(1), fields.get(2)
                if name is None or value is None or payload[name[0] : name[1]] != key:
                    continue
                for _, low, high in _fields(payload, *value, wanted=1):  # Feature.bytes_list
                    for _, first, last in _fields(payload, low, high, wanted=1):
                        if (last - first) % 2 == 0:
                            return first, (last - first) // 2
    except ValueError as damaged:
        raise ValueError(
            f"the {what} run {uri}: record {index} is not an audio Example ({damaged})"
        ) from None
    raise ValueError(
        f"the {what} run {uri}: record {index} holds no int16 PCM {layout.AUDIO_KEY!r} "
        "feature (an even number of bytes); materialize the clips with the audio job"
    )


def _fields(data: bytes, start: int, end: int, wanted: int | None = None):
    """Yields (field number, start, end) of the length-delimited fields in `data[start:end]`,
    skipping the others (and those not `wanted`)."""
    position = start
    while position < end:
        key, position = _varint(data, position)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, position = _varint(data, position)
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
        elif wire_type == 2:
            length, position = _varint(data, position)
            if position + length > end:
                raise ValueError(f"field {field} runs past its message")
            if wanted is None or field == wanted:
                yield field, position, position + length
            position += length
        else:
            raise ValueError(f"wire type {wire_type} of field {field}")
    if position != end:
        raise ValueError("a field runs past its message")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while position < len(data) and shift < 64:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    raise ValueError(f"a truncated varint at byte {position}")
