"""The noise clips and RIRs of the NumPy speaker augmentation (`plans.speaker_front`).

`ClipSet.open` reads a run's clips with `tfx_dynamic_inputs.records` (no TensorFlow) and keeps
what `inputs.augment_clips.ClipBank` keeps, by the same functions (`plans.clip_levels`): the
audible clips in record order, a RIR from its direct-path peak for at most `max_samples`. So a
keyed draw `clip` names the same record in both executors, and `windows` gathers the same
samples as `ClipBank.windows`.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from tfx_dynamic_inputs.plans.clip_levels import SILENCE_FLOOR_DB, direct_path_peak, is_silent
from tfx_dynamic_inputs.records import RunRecordSource

_FULL_SCALE = 32768.0


@dataclasses.dataclass(frozen=True)
class ClipSet:
    """The audible clips of a run, held as int16 (build it with `ClipSet.open`).

    Args:
      what: "noise" or "RIR", named in messages.
      records: int64 [K], the record number of each kept clip.
      clips: the K kept clips, int16 [n] each (a RIR from its peak, cut at `max_samples`).
      silent: the record numbers left out as silent.
    """

    what: str
    records: np.ndarray
    clips: tuple[np.ndarray, ...]
    silent: tuple[int, ...]

    @classmethod
    def open(
        cls,
        run_dir: str | os.PathLike,
        record_set: str,
        what: str,
        sample_rate: int,
        max_samples: int | None = None,
    ) -> ClipSet:
        """Reads and measures the clips of `record_set`; keeps the audible ones.

        Args:
          run_dir: the noise or RIR run (its folder).
          record_set: its record set of clips.
          what: "noise" or "RIR".
          sample_rate: the speech's rate, which the run must have.
          max_samples: a RIR's samples kept from its direct-path peak; None: whole clips.

        Raises:
          ValueError: a run at another rate, an empty record set, or one of silence only (one
            line naming the run).
        """
        source = RunRecordSource(run_dir, record_set, decode="audio")
        rate = (source.records.summary.get("config") or {}).get("sample_rate")
        if rate is not None and rate != sample_rate:
            raise ValueError(
                f"the {what} run {run_dir} stores audio at {rate} Hz but the speech is at "
                f"{sample_rate} Hz; materialize it with --sample_rate {sample_rate}"
            )
        if len(source) == 0:
            raise ValueError(f"the {what} run {run_dir} has no records in {record_set!r}")
        records, clips, silent = [], [], []
        for index in range(len(source)):
            pcm = source[index]["audio"]
            if max_samples is not None:
                peak = direct_path_peak(pcm)
                pcm = pcm[peak : peak + max_samples]
            if is_silent(pcm, per_sample=max_samples is None):
                silent.append(index)
            else:
                records.append(index)
                clips.append(pcm)
        if not clips:
            raise ValueError(
                f"the {what} run {run_dir}: all {len(source)} clips of record set "
                f"{record_set!r} are silent (below the {SILENCE_FLOOR_DB:g} dB floor); give a "
                f"run of audible {what} clips"
            )
        return cls(what, np.array(records, np.int64), tuple(clips), tuple(silent))

    @property
    def num_clips(self) -> int:
        """The clips drawn from."""
        return len(self.clips)

    @property
    def longest(self) -> int:
        """The most samples a kept clip has."""
        return max(len(clip) for clip in self.clips)

    def lengths(self, clip: np.ndarray) -> np.ndarray:
        """int64 [B]: the samples of each clip `clip` (int64 [B])."""
        return np.array([len(self.clips[c]) for c in np.asarray(clip).tolist()], np.int64)

    def windows(self, clip: np.ndarray, start: np.ndarray, width: int, *, loop: bool) -> np.ndarray:
        """float32 [B, width]: samples `start .. start + width - 1` of each clip, as
        `inputs.augment_clips.ClipBank.windows` gathers them.

        Args:
          clip: int64 [B] clips, in [0, num_clips).
          start: int64 [B] first samples.
          width: samples per window.
          loop: a clip shorter than its window repeats from its start (noise); else the window
            is zero past the clip's end (RIRs).
        """
        out = np.zeros((len(clip), width), np.float32)
        for row, (c, first) in enumerate(
            zip(np.asarray(clip).tolist(), np.asarray(start).tolist(), strict=True)
        ):
            pcm = self.clips[c]
            taken = first + np.arange(width)
            if loop:
                out[row] = pcm[taken % len(pcm)]
            else:
                inside = taken < len(pcm)
                out[row, inside] = pcm[taken[inside]]
        return out / np.float32(_FULL_SCALE)
