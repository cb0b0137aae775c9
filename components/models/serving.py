"""SavedModel exports that take what a client has and run the training front end in the graph.

Serving without skew: a client sends waveforms or audio files, pixels or image files, and the
graph turns them into model inputs with the very functions training used, so no client
re-implements (and drifts from) the training front end.

Speaker embedding net (`export_speaker_model`), every signature returning ``embedding`` float32
[B, D], L2-normalized (cosine scoring is a dot product):

- `embed_waveforms` (also ``serving_default``): ``waveforms`` float32 [B, T] in [-1, 1] at the
  training sample rate and ``lengths`` int32 [B] (valid samples per row; what follows is
  ignored).
- `embed_encoded_audio`: ``audio`` tf.string [B], one audio file each, at any rate from 1 to
  768 kHz and up to 600 s (the audio job's default limits): WAV of 8-bit unsigned, 16/24/32-bit
  integer or 32/64-bit float samples (format PCM, IEEE float, or WAVE_FORMAT_EXTENSIBLE of those),
  any channel count (`wav_decoding`); 16-bit FLAC too when exported with ``"flac"`` in
  `audio_formats`. Any other file (MP3, Ogg, M4A, an A-law WAV, ...) fails in one line naming
  what it is and what is accepted.
- `embed_log_mel`: ``features`` float32 [B, T, n_mels] log-mel features as the training front
  end computes them and ``lengths`` int32 [B] valid frames (the net's own inputs).

The audio goes the way training data went: samples converted to float as libsndfile reads them,
channels averaged, resampled to the training rate where the file is at another rate, and rounded
to int16, as the audio job (`tfx_dynamic_inputs.materialize.audio`) stores records, then the
evaluation front end of the trainer (`audio_features` in ``"pad"`` mode without SpecAugment: the
whole utterance, the same log-mel). A file at the training rate gives the job's record bit for
bit. The resampler is the speed perturbation's polyphase windowed-sinc filter
(`augment_signals.resample`) where the job has soxr: 51-53 dB from soxr on tones below 0.8 of
the narrower Nyquist band, where its gentler band edge begins (6 dB down at 0.9, where soxr is
flat), so the embeddings of resampled files are close to, not equal to, the job's
(`docs/components.md`).
tensorflow-io's resampler is no closer: at 22.05 -> 16 kHz it delays the signal by 32 samples,
differs from soxr by -27 dB after alignment and is hundreds of times slower.

CycleGAN generators (`export_cyclegan`), for each direction `x_to_y` (G) and `y_to_x` (F),
every signature returning ``images`` float32 [B, H, W, C] in [0, 1] and ``images_uint8`` uint8
[B, H, W, C] (`tf.image.convert_image_dtype`), H, W, C the training image shape:

- `x_to_y_uint8` (also ``serving_default``) / `y_to_x_uint8`: ``images`` uint8 [B, h, w, c] of
  any size, c in 1 to 4 (grey, grey + alpha, RGB, RGBA);
- `x_to_y_encoded` / `y_to_x_encoded`: ``images`` tf.string [B], PNG or JPEG files (what
  `tf.io.decode_image` reads) of any sizes;
- `x_to_y` / `y_to_x`: ``images`` float32 [B, H, W, C] in [0, 1] (the generators' own inputs).

Pixels become model inputs as the training inputs decode image records
(`tfx_dynamic_inputs.inputs.parsing.to_image_spec`): channels converted, scaled to [0, 1], resized
bilinearly to H x W. Where the pairs job stored raw pixels (``image_storage="raw"``, as the demo
does), Pillow resized them before training: images sent at H x W match training exactly, other
sizes get `tf.image.resize`'s bilinear filter, not Pillow's (which low-passes when it shrinks;
on the demo's 32 -> 16 digits they differ by up to 14/255 a pixel).

Pure TensorFlow and Keras: no TFX. tensorflow-io is imported only to export FLAC decoding, and
a SavedModel holding its ops loads only where `import tensorflow_io` ran first (and not in a
stock TF Serving), which is why FLAC is opt-in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

from tfx_dynamic_inputs.inputs import augment_signals
from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig
from tfx_dynamic_inputs.inputs.audio_features import audio_features
from tfx_dynamic_inputs.inputs.parsing import ImageSpec, to_image_spec
from tfx_dynamic_inputs.models import wav_decoding
from tfx_dynamic_inputs.models.cyclegan import CycleGAN
from tfx_dynamic_inputs.models.speaker import EMBEDDING_OUTPUT, FEATURES_KEY, LENGTHS_KEY

WAVEFORMS_SIGNATURE = "embed_waveforms"
ENCODED_AUDIO_SIGNATURE = "embed_encoded_audio"
LOG_MEL_SIGNATURE = "embed_log_mel"
WAVEFORMS_KEY = "waveforms"
AUDIO_KEY = "audio"
AUDIO_FORMATS = ("wav", "flac")

X_TO_Y = "x_to_y"
Y_TO_X = "y_to_x"
UINT8_SUFFIX = "_uint8"
ENCODED_SUFFIX = "_encoded"
IMAGES_KEY = "images"
IMAGES_UINT8_KEY = "images_uint8"

# int16 full scale, as the audio job's `to_int16` and `audio_features.decode_padded` use it.
_PCM16_SCALE = 32768.0
# FLAC files open with "fLaC" and the STREAMINFO block (a 4-byte header, then the data): its
# sample rate (20 bits), channels - 1 (3 bits), bits per sample - 1 (5 bits) and total samples
# (36 bits) start 10 bytes into the data, at byte 18 of the file.
_FLAC_STREAMINFO_RATE_OFFSET = 18


def quantize_pcm16(samples: tf.Tensor) -> tf.Tensor:
    """Rounds samples to the int16 grid, as the audio job stores them.

    As `tfx_dynamic_inputs.materialize.audio.to_int16`: rounded half to even, clipped.

    Args:
        samples: float32 [...] in [-1, 1].

    Returns:
        float32 [...], the same shape: multiples of 1/32768 in [-1, 1 - 1/32768].
    """
    steps = tf.clip_by_value(tf.round(samples * _PCM16_SCALE), -_PCM16_SCALE, _PCM16_SCALE - 1)
    return steps / _PCM16_SCALE


def pcm16_records(waveforms: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    """Waveform rows as audio records hold them: mono little-endian int16 PCM (`quantize_pcm16`).

    Core TF has no op that writes a tensor's bytes; `encode_wav` does, after a header, so the
    whole batch is encoded once and each row's bytes are cut out of the data chunk that ends the
    file. Samples already on the int16 grid pass through `encode_wav` unchanged.

    Args:
        waveforms: float32 [B, T] in [-1, 1].
        lengths: int [B], the valid samples of each row (at most T).

    Returns:
        tf.string [B]: the first `lengths[b]` samples of row b, 2 bytes each.
    """
    batch, width = tf.shape(waveforms)[0], tf.shape(waveforms)[1]
    wav = tf.audio.encode_wav(tf.reshape(quantize_pcm16(waveforms), [-1, 1]), sample_rate=1)
    data_start = tf.strings.length(wav) - 2 * batch * width
    return tf.strings.substr(
        wav, data_start + 2 * width * tf.range(batch), 2 * tf.cast(lengths, tf.int32)
    )


def decode_audio_files(
    audio: tf.Tensor, sample_rate: int, audio_formats: Sequence[str] = ("wav",)
) -> tf.Tensor:
    """tf.string [B] audio files -> tf.string [B] audio records at `sample_rate`.

    Each file is decoded as the audio job decodes it (`wav_decoding.decode_wav`; 16-bit FLAC by
    `tensorflow_io.audio.decode_flac` when `audio_formats` holds ``"flac"``), its channels
    averaged, resampled to `sample_rate` where it is at another rate (`augment_signals.resample`,
    the speed perturbation's filter, where the job has soxr) and rounded to int16, as the job
    stores a record.

    Args:
        audio: tf.string [B], one audio file each.
        sample_rate: the training sample rate, Hz.
        audio_formats: ``("wav",)`` or ``("wav", "flac")``.

    Returns:
        tf.string [B] audio records (mono int16 PCM at `sample_rate`).

    Raises:
        ValueError: `audio_formats` is neither of the two.
        tf.errors.InvalidArgumentError: (when run) a file the model does not take, in one line
            naming its position in the batch, what it is and what is accepted.
    """
    check_audio_formats(audio_formats)
    flac = "flac" in audio_formats
    accepted = f"{wav_decoding.ACCEPTED_WAV}, or 16-bit FLAC" if flac else wav_decoding.ACCEPTED_WAV

    # Plain TensorFlow ops: autograph, which map_fn applies, would only spend seconds converting.
    @tf.autograph.experimental.do_not_convert
    def decode_one(item: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        position, data = item
        what = "audio item " + wav_decoding.text(position)
        container = wav_decoding.container_name(data)
        is_flac = tf.equal(container, "FLAC") if flac else tf.constant(False)
        refused = wav_decoding.first_problem(
            what,
            (
                tf.equal(container, ""),
                "no audio file the model knows (first bytes {}); it takes " + accepted,
                (wav_decoding.first_bytes(data),),
            ),
            (
                tf.logical_not(tf.logical_or(tf.equal(container, "WAV"), is_flac)),
                "{} audio, not accepted; the model takes " + accepted,
                (container,),
            ),
        )
        with tf.control_dependencies([wav_decoding.assert_no_problem(refused)]):
            data = tf.identity(data)
        if flac:
            samples, rate = tf.cond(
                is_flac,
                lambda: _decode_flac(data, what),
                lambda: wav_decoding.decode_wav(data, what),
            )
        else:
            samples, rate = wav_decoding.decode_wav(data, what)
        mono = tf.reduce_mean(samples, axis=1)
        resampled = tf.cond(
            tf.equal(rate, sample_rate),
            lambda: mono,
            lambda: augment_signals.resample(mono, rate, sample_rate),
        )
        return pcm16_records(resampled[tf.newaxis], tf.size(resampled)[tf.newaxis])[0]

    positions = tf.range(tf.size(audio, out_type=tf.int64))
    return tf.map_fn(
        decode_one, (positions, audio), fn_output_signature=tf.TensorSpec([], tf.string)
    )


def _decode_flac(data: tf.Tensor, what: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """float32 [n, channels] samples (int16 / 32768) and the int64 rate of a 16-bit FLAC that
    declares its length, within `wav_decoding`'s limits."""
    import tensorflow_io as tfio  # only here: its ops make a SavedModel need it to load

    # STREAMINFO: rate (20 bits), channels - 1 (3), bits per sample - 1 (5), total samples (36).
    header = tf.cast(
        tf.io.decode_raw(
            tf.strings.substr(data, _FLAC_STREAMINFO_RATE_OFFSET, 8), tf.uint8, fixed_length=8
        ),
        tf.int64,
    )
    rate = header[0] * 4096 + header[1] * 16 + header[2] // 16
    bits = (header[2] % 2) * 16 + header[3] // 16 + 1
    frames = (header[3] % 16) * (1 << 32) + tf.reduce_sum(header[4:] * [1 << 24, 1 << 16, 256, 1])
    seconds = wav_decoding.MAX_AUDIO_SECONDS
    problem = wav_decoding.first_problem(
        what,
        (tf.not_equal(bits, 16), "a FLAC of {}-bit samples; the model takes 16-bit FLAC", (bits,)),
        (
            tf.logical_or(rate < wav_decoding.MIN_SAMPLE_RATE, rate > wav_decoding.MAX_SAMPLE_RATE),
            f"a FLAC at {{}} Hz, outside {wav_decoding.MIN_SAMPLE_RATE} to "
            f"{wav_decoding.MAX_SAMPLE_RATE} Hz",
            (rate,),
        ),
        (
            tf.logical_or(
                tf.equal(frames, 0),
                tf.cast(frames, tf.float64) > seconds * tf.cast(rate, tf.float64),
            ),
            f"a FLAC of {{}} frames (0: not declared), not 1 to {seconds:g} s long",
            (frames,),
        ),
    )
    check = wav_decoding.assert_no_problem(problem)
    with tf.control_dependencies([check]):
        pcm = tfio.audio.decode_flac(data, dtype=tf.int16)
    return tf.cast(pcm, tf.float32) / _PCM16_SCALE, rate


def check_audio_formats(audio_formats: Sequence[str]) -> None:
    """Checks the audio formats an export is asked to decode.

    Args:
        audio_formats: The formats, e.g. ``("wav", "flac")``.

    Raises:
        ValueError: `audio_formats` does not hold "wav", or holds a format not in
            `AUDIO_FORMATS`.
    """
    unknown = sorted(set(audio_formats) - set(AUDIO_FORMATS))
    if unknown or "wav" not in audio_formats:
        raise ValueError(
            f"audio_formats must hold 'wav' and may hold 'flac' (of {AUDIO_FORMATS}), got "
            f"{list(audio_formats)}"
        )


def speaker_front_end(features: AudioFeatureConfig) -> AudioFeatureConfig:
    """The front end of the signatures: the trainer's evaluation features of training's.

    Args:
        features: The `AudioFeatureConfig` the training batches were computed with.

    Returns:
        A copy in ``"pad"`` mode (whole utterances) without SpecAugment.
    """
    return dataclasses.replace(features, mode="pad", spec_augment=None)


def export_speaker_model(
    embedding_model: keras.Model,
    export_dir: str,
    features: AudioFeatureConfig,
    *,
    audio_formats: Sequence[str] = ("wav",),
) -> None:
    """Writes the embedding net with its audio front end as a SavedModel to `export_dir`.

    Signatures are in the module docstring.

    Args:
        embedding_model: `speaker.build_embedding_model`'s net, [features, lengths] -> [B, D].
        export_dir: Where the SavedModel goes.
        features: The `AudioFeatureConfig` the training batches were computed with.
        audio_formats: Files `embed_encoded_audio` decodes: ``("wav",)`` or ``("wav", "flac")``
            (FLAC needs tensorflow-io wherever the SavedModel is loaded, see the module
            docstring).

    Raises:
        ValueError: unknown `audio_formats`, or the net takes another number of mel bins than
            `features` computes.

    Example:
        export_speaker_model(model.embedding_model, export_dir, features)
        embed = tf.saved_model.load(export_dir).signatures["embed_waveforms"]
    """
    check_audio_formats(audio_formats)
    n_mels = int(embedding_model.inputs[0].shape[-1])
    if n_mels != features.num_mel_bins:
        raise ValueError(
            f"the net takes {n_mels} mel bins but the front end computes {features.num_mel_bins}"
        )
    front_end = speaker_front_end(features)

    def embed(log_mel: tf.Tensor, frames: tf.Tensor) -> dict[str, tf.Tensor]:
        embedding = embedding_model([log_mel, tf.cast(frames, tf.int32)], training=False)
        return {EMBEDDING_OUTPUT: tf.math.l2_normalize(embedding, axis=-1)}

    def embed_records(records: tf.Tensor, what: str) -> dict[str, tf.Tensor]:
        num_samples = tf.strings.length(records) // 2
        too_short = num_samples < front_end.frame_length
        check = tf.debugging.Assert(
            tf.logical_not(tf.reduce_any(too_short)),
            [
                f"every {what} needs at least one {front_end.frame_length_ms} ms frame "
                f"({front_end.frame_length} samples at {front_end.sample_rate} Hz); "
                f"shorter {what}s (positions, samples):",
                tf.where(too_short)[:, 0],
                tf.boolean_mask(num_samples, too_short),
            ],
            summarize=16,
        )
        with tf.control_dependencies([check]):
            computed = audio_features(records, front_end)
        return embed(computed[FEATURES_KEY], computed[LENGTHS_KEY])

    def embed_waveforms(waveforms: tf.Tensor, lengths: tf.Tensor) -> dict[str, tf.Tensor]:
        width = tf.shape(waveforms, out_type=lengths.dtype)[1]
        outside = tf.logical_or(lengths < 0, lengths > width)
        check = tf.debugging.Assert(
            tf.logical_not(tf.reduce_any(outside)),
            [
                "lengths must lie in [0, T], T the waveforms' width:",
                width,
                "rows with other lengths (positions, lengths):",
                tf.where(outside)[:, 0],
                tf.boolean_mask(lengths, outside),
            ],
            summarize=16,
        )
        with tf.control_dependencies([check]):
            return embed_records(pcm16_records(waveforms, lengths), "row")

    def embed_encoded_audio(audio: tf.Tensor) -> dict[str, tf.Tensor]:
        records = decode_audio_files(audio, front_end.sample_rate, audio_formats)
        return embed_records(records, "audio item")

    archive = keras.export.ExportArchive()
    archive.track(embedding_model)
    # The first endpoint is also `serving_default`.
    archive.add_endpoint(
        WAVEFORMS_SIGNATURE,
        embed_waveforms,
        input_signature=[
            tf.TensorSpec([None, None], tf.float32, name=WAVEFORMS_KEY),
            tf.TensorSpec([None], tf.int32, name=LENGTHS_KEY),
        ],
    )
    archive.add_endpoint(
        ENCODED_AUDIO_SIGNATURE,
        embed_encoded_audio,
        input_signature=[tf.TensorSpec([None], tf.string, name=AUDIO_KEY)],
    )
    archive.add_endpoint(
        LOG_MEL_SIGNATURE,
        embed,
        input_signature=[
            tf.TensorSpec([None, None, n_mels], tf.float32, name=FEATURES_KEY),
            tf.TensorSpec([None], tf.int32, name=LENGTHS_KEY),
        ],
    )
    archive.write_out(export_dir, verbose=False)


def decode_image_files(images: tf.Tensor, image: ImageSpec) -> tf.Tensor:
    """Decodes image files as the training inputs decode an encoded image record.

    Args:
        images: tf.string [B], PNG or JPEG files (what `tf.io.decode_image` reads) of any sizes.
        image: The training image spec: (H, W, C) and dtype.

    Returns:
        `image.dtype` [B, H, W, C]: channels converted, scaled and resized to the spec.

    Raises:
        tf.errors.InvalidArgumentError: (when run) a file does not decode, or decodes to
            another channel count than 1 to 4 (this message names its position in the batch).
    """
    positions = tf.range(tf.size(images, out_type=tf.int64))

    def decode_one(item: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        position, data = item
        decoded = tf.io.decode_image(data, channels=0, expand_animations=False)
        return to_image_spec(decoded, image, tf.strings.format("at position {}", position))

    return tf.map_fn(
        decode_one, (positions, images), fn_output_signature=tf.TensorSpec(image.shape, image.dtype)
    )


def export_cyclegan(model: CycleGAN, export_dir: str) -> None:
    """Writes both generators with their image front end as a SavedModel to `export_dir`.

    Signatures are in the module docstring.

    Args:
        model: The trained CycleGAN; its `image_shape` is the signatures' H, W, C.
        export_dir: Where the SavedModel goes.

    Example:
        export_cyclegan(model, export_dir)
        translate = tf.saved_model.load(export_dir).signatures["x_to_y_uint8"]
    """
    image = ImageSpec(*model.image_shape, dtype=tf.float32)

    archive = keras.export.ExportArchive()
    archive.track(model.generator_xy)
    archive.track(model.generator_yx)
    directions = ((X_TO_Y, model.generator_xy), (Y_TO_X, model.generator_yx))
    # The first endpoint is also `serving_default`: x -> y on uint8 pixels.
    for name, generator in directions:
        archive.add_endpoint(
            name + UINT8_SUFFIX,
            _translation(generator, lambda images: to_image_spec(images, image, "in the request")),
            input_signature=[tf.TensorSpec([None, None, None, None], tf.uint8, name=IMAGES_KEY)],
        )
    for name, generator in directions:
        archive.add_endpoint(
            name + ENCODED_SUFFIX,
            _translation(generator, lambda images: decode_image_files(images, image)),
            input_signature=[tf.TensorSpec([None], tf.string, name=IMAGES_KEY)],
        )
        archive.add_endpoint(
            name,
            _translation(generator, tf.identity),
            input_signature=[tf.TensorSpec([None, *image.shape], tf.float32, name=IMAGES_KEY)],
        )
    archive.write_out(export_dir, verbose=False)


def _translation(
    generator: keras.Model, to_model_inputs: Callable[[tf.Tensor], tf.Tensor]
) -> Callable[[tf.Tensor], dict[str, tf.Tensor]]:
    """A signature function: request images -> `to_model_inputs` -> `generator` -> both
    output forms."""

    def translate(images: tf.Tensor) -> dict[str, tf.Tensor]:
        translated = generator(to_model_inputs(images), training=False)
        return {
            IMAGES_KEY: translated,
            IMAGES_UINT8_KEY: tf.image.convert_image_dtype(translated, tf.uint8, saturate=True),
        }

    return translate
