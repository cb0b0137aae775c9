"""More speaker corpora mixed with the speaker pipeline's own: the `--mix FILE` of
`run_local speaker`, read and checked before TFX or TensorFlow load.

The file is a JSON list, one object per extra corpus: ``{"audio_root": ..., "manifest": ...,
"weight": ...}`` (paths relative to the file's folder unless absolute; `weight` > 0, default
1.0). The pipeline's own corpus (`--audio_root` / `--manifest`) weighs 1.0. Each corpus is
materialized by its own MaterializeAudio and the trainer mixes them all
(`ClassBalancedTrainer(mixed_class_index=...)`): speakers are namespaced by corpus, so a speaker
name in two corpora is two classes.

Example (``mix.json``):

    [{"audio_root": "vox2/wav", "manifest": "vox2/manifest.csv", "weight": 2.0}]
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

from tfx_dynamic_inputs.pipeline import cli, config


@dataclasses.dataclass(frozen=True)
class MixedCorpus:
    """One extra corpus of a mix: its audio folder, manifest and weight.

    Args:
      audio_root: the folder the manifest's paths are relative to.
      manifest: the manifest (CSV with a header, or JSON Lines): path, speaker[, split].
      weight: its weight relative to the pipeline's own corpus (1.0), > 0.

    Raises:
      cli.ConfigError: a weight that is not a number > 0.
    """

    audio_root: str
    manifest: str
    weight: float = 1.0

    def __post_init__(self):
        weight = self.weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise cli.ConfigError(f"a mixed corpus's weight must be a number, got {weight!r}")
        if not (math.isfinite(weight) and weight > 0):
            raise cli.ConfigError(f"a mixed corpus's weight must be > 0, got {weight!r}")


def mixed_corpora(pipeline_config: config.SpeakerConfig) -> tuple[MixedCorpus, ...]:
    """The extra corpora `pipeline_config.mix` lists (none without a mix file), checked.

    Args:
      pipeline_config: the speaker pipeline's config.

    Returns:
      The `MixedCorpus` entries, paths resolved against the file's folder.

    Raises:
      cli.ConfigError: a missing or malformed file, an entry without `audio_root` / `manifest`
        or with other keys, a path that does not exist, a bad weight, or options a mix does not
        plan (epoch_mode "samples", max_draws_per_record), each in one line naming the file.

    Example:

        mixed_corpora(config.SpeakerConfig(mix="mix.json", epoch_mode="classes"))
    """
    path = pipeline_config.mix
    if path is None:
        return ()
    where = f"--mix {path}"
    if pipeline_config.epoch_mode != "classes" or pipeline_config.max_draws_per_record is not None:
        raise cli.ConfigError(
            f"{where}: a mix plans epoch_mode classes without max_draws_per_record; pass "
            "--epoch_mode classes"
        )
    if pipeline_config.speaker_from_path:
        raise cli.ConfigError(f"{where}: mix corpora with manifests, not --speaker_from_path")
    if not os.path.isfile(path):
        raise cli.ConfigError(f"{where}: no such file")
    try:
        with open(path) as f:
            entries = json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        raise cli.ConfigError(f"{where}: not a JSON list of corpora ({error})") from None
    if not isinstance(entries, list) or not entries:
        raise cli.ConfigError(f"{where}: must be a non-empty JSON list of corpora")
    folder = os.path.dirname(os.path.abspath(path))
    corpora = []
    for number, entry in enumerate(entries):
        here = f"{where}, corpus {number}"
        if not isinstance(entry, dict) or not {"audio_root", "manifest"} <= set(entry):
            raise cli.ConfigError(f"{here}: give an object with audio_root and manifest")
        unknown = sorted(set(entry) - {"audio_root", "manifest", "weight"})
        if unknown:
            raise cli.ConfigError(f"{here}: unknown keys {unknown} (audio_root, manifest, weight)")
        audio_root, manifest = (
            os.path.normpath(os.path.join(folder, entry[k])) for k in ("audio_root", "manifest")
        )
        if not os.path.isdir(audio_root):
            raise cli.ConfigError(f"{here}: audio_root: no such folder: {audio_root}")
        if not os.path.isfile(manifest):
            raise cli.ConfigError(f"{here}: manifest: no such file: {manifest}")
        try:
            corpora.append(MixedCorpus(audio_root, manifest, entry.get("weight", 1.0)))
        except cli.ConfigError as error:
            raise cli.ConfigError(f"{here}: {error}") from None
    return tuple(corpora)


def corpus_config(pipeline_config: config.SpeakerConfig, corpus: MixedCorpus):
    """The pipeline's config with `corpus`'s data in place of its own (what that corpus's
    MaterializeAudio reads, and fingerprints).

    Args:
      pipeline_config: the speaker pipeline's config.
      corpus: one of its `mixed_corpora`.

    Returns:
      A `SpeakerConfig`.
    """
    return dataclasses.replace(
        pipeline_config, audio_root=corpus.audio_root, manifest=corpus.manifest, mix=None
    )
