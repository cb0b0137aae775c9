"""The exported SavedModels: every signature gives what the training path gives for the same
input (tiny untrained nets: any front-end difference moves their outputs far past the
tolerances)."""

from __future__ import annotations

import io

import keras
import numpy as np
import pytest
import soundfile
import tensorflow as tf
import tensorflow_io  # noqa: F401  (registers the FLAC decoder the FLAC-enabled export holds)
from PIL import Image
from tensorflow.core.protobuf import saved_model_pb2

from tests.class_balanced.runs import write_audio_run
from tests.inputs.runs import image_example as raw_image_example
from tfx_dynamic_inputs.inputs import ImageSpec, image_example_parser
from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig, SpecAugment
from tfx_dynamic_inputs.materialize.audio import decode_audio, to_int16
from tfx_dynamic_inputs.materialize.images import ImageStorage
from tfx_dynamic_inputs.materialize.images import image_example as encoded_image_example
from tfx_dynamic_inputs.models import cyclegan, serving, speaker
from tfx_dynamic_inputs.trainer_component.training_inputs import class_balanced_eval_dataset

RATE = 16000
N_MELS = 24
EMBEDDING_DIM = 6
# Not the defaults, so an export that ignored the training config would differ; the crop and
# SpecAugment settings are training-only and must not reach the signatures.
FEATURES = AudioFeatureConfig(
    sample_rate=RATE,
    num_mel_bins=N_MELS,
    frame_length_ms=20.0,
    frame_step_ms=8.0,
    lower_edge_hertz=60.0,
    crop_seconds=0.1,
    spec_augment=SpecAugment(),
)
ATOL = 1e-5


def _normalized(embedding: np.ndarray) -> np.ndarray:
    return embedding / np.linalg.norm(embedding, axis=-1, keepdims=True)


def _encode(samples: np.ndarray, file_format: str, rate: int = RATE, subtype="PCM_16") -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=file_format, subtype=subtype)
    return buffer.getvalue()


def _signature_specs(signature) -> dict[str, tuple[tf.DType, list]]:
    _, inputs = signature.structured_input_signature
    return {name: (spec.dtype, spec.shape.as_list()) for name, spec in inputs.items()}


def _output_specs(signature) -> dict[str, tuple[tf.DType, list]]:
    return {
        name: (spec.dtype, spec.shape.as_list())
        for name, spec in signature.structured_outputs.items()
    }


def _op_types(export_dir: str) -> set[str]:
    with open(f"{export_dir}/saved_model.pb", "rb") as f:
        saved = saved_model_pb2.SavedModel.FromString(f.read())
    (graph,) = [meta.graph_def for meta in saved.meta_graphs]
    return {node.op for function in graph.library.function for node in function.node_def}


@pytest.fixture(scope="module")
def speaker_export(tmp_path_factory):
    """A tiny net exported with WAV and FLAC decoding, and the embeddings the trainer's
    evaluation path (records of a materialized run -> `class_balanced_eval_dataset` -> the net)
    gives each record, one record a batch (no padding)."""
    root = tmp_path_factory.mktemp("speaker_serving")
    run_dir = str(root / "run")
    # Six utterances of 0.05 s to 0.4 s; records as the audio job writes them.
    waveforms = write_audio_run(run_dir, [3, 3], min_samples=800, max_samples=6400)["waveforms"]
    keras.utils.set_random_seed(0)
    net = speaker.build_embedding_model(N_MELS, channels=8, embedding_dim=EMBEDDING_DIM)
    export_dir = str(root / "serving")
    serving.export_speaker_model(net, export_dir, FEATURES, audio_formats=("wav", "flac"))
    training_path = class_balanced_eval_dataset(
        run_dir, run_dir, "train", batch_size=1, parser=FEATURES
    )
    expected = np.concatenate(
        [
            _normalized(net([batch["features"], batch["lengths"]], training=False).numpy())
            for batch in training_path
        ]
    )
    return tf.saved_model.load(export_dir), waveforms, expected, run_dir


def test_speaker_signatures_take_and_give_the_documented_tensors(speaker_export):
    loaded, _, _, _ = speaker_export
    signatures = loaded.signatures
    assert set(signatures) == {
        "serving_default",
        serving.WAVEFORMS_SIGNATURE,
        serving.ENCODED_AUDIO_SIGNATURE,
        serving.LOG_MEL_SIGNATURE,
    }
    waveforms = {"waveforms": (tf.float32, [None, None]), "lengths": (tf.int32, [None])}
    assert _signature_specs(signatures["serving_default"]) == waveforms
    assert _signature_specs(signatures["embed_waveforms"]) == waveforms
    assert _signature_specs(signatures["embed_encoded_audio"]) == {"audio": (tf.string, [None])}
    assert _signature_specs(signatures["embed_log_mel"]) == {
        "features": (tf.float32, [None, None, N_MELS]),
        "lengths": (tf.int32, [None]),
    }
    for signature in signatures.values():
        assert _output_specs(signature) == {"embedding": (tf.float32, [None, EMBEDDING_DIM])}


def test_waveforms_give_the_training_path_embeddings(speaker_export):
    loaded, waveforms, expected, _ = speaker_export
    serve = loaded.signatures["serving_default"]
    lengths = [len(w) for w in waveforms]
    assert len(set(lengths)) == len(lengths)  # so each row below carries its own padding
    for row in (0, 3):  # one utterance alone, no padding
        alone = serve(
            waveforms=tf.constant(waveforms[row][np.newaxis] / 32768.0, tf.float32),
            lengths=tf.constant([lengths[row]]),
        )["embedding"].numpy()
        np.testing.assert_allclose(alone, expected[row : row + 1], atol=ATOL)
    # All of them in one batch; the padding is loud noise, which must not count.
    rng = np.random.default_rng(1)
    batch = rng.uniform(-1, 1, (len(waveforms), max(lengths) + 37)).astype(np.float32)
    for row, waveform in enumerate(waveforms):
        batch[row, : len(waveform)] = waveform / 32768.0
    embeddings = serve(waveforms=tf.constant(batch), lengths=tf.constant(lengths))["embedding"]
    np.testing.assert_allclose(embeddings.numpy(), expected, atol=ATOL)
    np.testing.assert_allclose(np.linalg.norm(embeddings.numpy(), axis=-1), 1.0, atol=1e-6)
    # Samples off the int16 grid are rounded to it, as the audio job stores them.
    off_grid = batch + rng.uniform(-0.49, 0.49, batch.shape).astype(np.float32) / 32768.0
    rounded = serve(waveforms=tf.constant(off_grid), lengths=tf.constant(lengths))["embedding"]
    np.testing.assert_allclose(rounded.numpy(), expected, atol=ATOL)


def test_wav_and_flac_files_give_the_training_path_embeddings(speaker_export):
    loaded, waveforms, expected, _ = speaker_export
    serve = loaded.signatures["embed_encoded_audio"]
    files = [
        _encode(waveform, "WAV" if row % 2 else "FLAC") for row, waveform in enumerate(waveforms)
    ]
    embeddings = serve(audio=tf.constant(files))["embedding"].numpy()
    np.testing.assert_allclose(embeddings, expected, atol=ATOL)
    for row in (1, 2):  # one file alone, of each format
        alone = serve(audio=tf.constant([files[row]]))["embedding"].numpy()
        np.testing.assert_allclose(alone, expected[row : row + 1], atol=ATOL)


def test_the_log_mel_signature_takes_the_training_features(speaker_export):
    loaded, _, expected, run_dir = speaker_export
    # The same records' training features, all in one batch padded to the longest.
    (batch,) = class_balanced_eval_dataset(run_dir, run_dir, "train", batch_size=6, parser=FEATURES)
    assert len(set(batch["lengths"].numpy())) == 6
    embeddings = loaded.signatures["embed_log_mel"](
        features=batch["features"], lengths=batch["lengths"]
    )["embedding"].numpy()
    np.testing.assert_allclose(embeddings, expected, atol=ATOL)


def test_files_decode_to_the_records_the_audio_job_stores():
    rng = np.random.default_rng(3)
    stereo = rng.integers(-30000, 30000, (1500, 2)).astype(np.int16)
    mono = rng.integers(-30000, 30000, 1100).astype(np.int16)
    files = [
        _encode(stereo, "WAV"),
        _encode(stereo, "FLAC"),
        _encode(mono, "WAV"),
        _encode(mono, "FLAC"),
        _encode(stereo, "WAV", rate=22050),
        _encode(stereo, "FLAC", rate=22050),
    ]
    records = serving.decode_audio_files(tf.constant(files), RATE, ("wav", "flac")).numpy()
    for file, record in zip(files[:4], records[:4], strict=True):
        stored = decode_audio(file, "request", RATE).samples
        assert record == stored.astype("<i2").tobytes()
    # Another rate is resampled to the training rate (test_serving_audio_files.py: how closely).
    for file, record in zip(files[4:], records[4:], strict=True):
        assert len(record) == 2 * len(decode_audio(file, "request", RATE).samples)
    assert records[4] == records[5]


def test_waveforms_become_records_as_the_audio_job_rounds_them():
    rng = np.random.default_rng(4)
    ties = (np.arange(-6, 6) + 0.5) / 32768.0  # halfway between two int16 steps
    beyond = [1.0, 1.5, -1.0, -1.5, 32767.4 / 32768.0]
    noise = rng.uniform(-1, 1, 30)
    rows = [np.concatenate([ties, beyond, noise]).astype(np.float32), noise[:7].astype(np.float32)]
    lengths = [len(rows[0]), len(rows[1])]
    batch = np.zeros((2, lengths[0]), np.float32)
    for row, samples in enumerate(rows):
        batch[row, : len(samples)] = samples
    batch[1, lengths[1] :] = 0.75  # padding: not part of the record
    records = serving.pcm16_records(tf.constant(batch), tf.constant(lengths)).numpy()
    for samples, record in zip(rows, records, strict=True):
        assert record == to_int16(samples).astype("<i2").tobytes()


def test_requests_the_front_end_cannot_take_are_errors_naming_the_item(speaker_export):
    loaded, waveforms, _, _ = speaker_export
    encoded = loaded.signatures["embed_encoded_audio"]
    good = _encode(waveforms[0], "WAV")
    # (Other rates, widths and float WAVs are served: test_serving_audio_files.py.)
    cases = [
        (_encode(waveforms[0], "FLAC", subtype="PCM_24"), "a FLAC of 24-bit samples"),
        (_encode(waveforms[0], "OGG", subtype="VORBIS"), r"is Ogg .* not accepted.*or 16-bit FLAC"),
        # Bytes that are not text are named as numbers (they broke the message before).
        (b"\x00\x01\x80\x81" + bytes(40), r"first bytes \[0 1 128 129 0"),
        (_encode(waveforms[0][:200], "WAV"), "at least one 20.0 ms frame"),
    ]
    for bad, message in cases:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            encoded(audio=tf.constant([good, bad]))
    serve = loaded.signatures["serving_default"]
    batch = tf.zeros([2, 400])
    with pytest.raises(tf.errors.InvalidArgumentError, match="lengths must lie in"):
        serve(waveforms=batch, lengths=tf.constant([400, 401]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="at least one 20.0 ms frame"):
        serve(waveforms=batch, lengths=tf.constant([400, 319]))
    assert serve(waveforms=batch, lengths=tf.constant([400, 320]))["embedding"].shape == (2, 6)


def test_default_export_decodes_wav_without_tensorflow_io_ops(tmp_path, speaker_export):
    _, waveforms, expected, _ = speaker_export
    keras.utils.set_random_seed(0)
    net = speaker.build_embedding_model(N_MELS, channels=8, embedding_dim=EMBEDDING_DIM)
    wav_only, with_flac = str(tmp_path / "wav"), str(tmp_path / "flac")
    serving.export_speaker_model(net, wav_only, FEATURES)
    serving.export_speaker_model(net, with_flac, FEATURES, audio_formats=("wav", "flac"))
    # tensorflow-io's ops are named "IO>..."; a SavedModel that holds one does not load without
    # `import tensorflow_io`.
    assert not any(op.startswith("IO>") for op in _op_types(wav_only))
    assert "IO>AudioDecodeFlac" in _op_types(with_flac)
    encoded = tf.saved_model.load(wav_only).signatures["embed_encoded_audio"]
    wav = encoded(audio=tf.constant([_encode(waveforms[1], "WAV")]))["embedding"].numpy()
    np.testing.assert_allclose(wav, expected[1:2], atol=ATOL)
    with pytest.raises(tf.errors.InvalidArgumentError, match="is FLAC audio, not accepted"):
        encoded(audio=tf.constant([_encode(waveforms[1], "FLAC")]))


def test_speaker_exports_refuse_settings_they_cannot_serve(tmp_path):
    net = speaker.build_embedding_model(N_MELS, channels=4, embedding_dim=3)
    for formats in (("flac",), ("wav", "mp3")):
        with pytest.raises(ValueError, match="audio_formats"):
            serving.export_speaker_model(net, str(tmp_path), FEATURES, audio_formats=formats)
    with pytest.raises(ValueError, match="takes 24 mel bins but the front end computes 80"):
        serving.export_speaker_model(net, str(tmp_path), AudioFeatureConfig())
    assert not (tmp_path / "saved_model.pb").exists()


# CycleGAN ---------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[(12, 8, 1), (8, 12, 3)], ids=["grey", "rgb"])
def gan_export(request, tmp_path_factory):
    """A tiny CycleGAN of a grey or RGB (non-square) image shape, exported, and the parse
    function of its training inputs (`image_example_parser`, as `pairs_train_dataset` builds
    it)."""
    keras.utils.set_random_seed(1)
    model = cyclegan.CycleGAN(
        request.param,
        generator_filters=2,
        num_downsamplings=1,
        num_residual_blocks=1,
        discriminator_filters=2,
    )
    export_dir = str(tmp_path_factory.mktemp("gan_serving"))
    serving.export_cyclegan(model, export_dir)
    parse = image_example_parser(ImageSpec(*request.param, dtype=tf.float32))
    return model, tf.saved_model.load(export_dir), parse


def _translations(generator: keras.Model, parse, records: list[bytes]) -> np.ndarray:
    """The training path: image records -> training inputs -> the generator."""
    return generator(parse(tf.constant(records)), training=False).numpy()


def _image_file(pixels: np.ndarray, file_format: str) -> bytes:
    """uint8 [h, w, c] (c in 1 to 4) as a PNG or JPEG file."""
    buffer = io.BytesIO()
    Image.fromarray(pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels).save(
        buffer, file_format
    )
    return buffer.getvalue()


def test_cyclegan_signatures_take_and_give_the_documented_tensors(gan_export):
    model, loaded, _ = gan_export
    shape = list(model.image_shape)
    signatures = loaded.signatures
    names = [f"{d}{s}" for d in ("x_to_y", "y_to_x") for s in ("", "_uint8", "_encoded")]
    assert set(signatures) == {"serving_default", *names}
    for name in ("serving_default", "x_to_y_uint8", "y_to_x_uint8"):
        assert _signature_specs(signatures[name]) == {"images": (tf.uint8, [None] * 4)}
    for name in ("x_to_y_encoded", "y_to_x_encoded"):
        assert _signature_specs(signatures[name]) == {"images": (tf.string, [None])}
    for name in ("x_to_y", "y_to_x"):
        assert _signature_specs(signatures[name]) == {"images": (tf.float32, [None, *shape])}
    for signature in signatures.values():
        assert _output_specs(signature) == {
            "images": (tf.float32, [None, *shape]),
            "images_uint8": (tf.uint8, [None, *shape]),
        }


def test_uint8_images_of_any_size_give_the_training_path_translations(gan_export):
    model, loaded, parse = gan_export
    height, width, channels = model.image_shape
    rng = np.random.default_rng(5)
    directions = (
        (loaded.signatures["serving_default"], model.generator_xy),
        (loaded.signatures["x_to_y_uint8"], model.generator_xy),
        (loaded.signatures["y_to_x_uint8"], model.generator_yx),
    )
    # The training size (the vectorized raw path), other sizes and every channel count.
    for shape in ((4, height, width, channels), (3, 20, 10, 1), (2, 7, 5, 4), (2, 9, 30, 3)):
        pixels = rng.integers(0, 256, shape, dtype=np.uint8)
        records = [raw_image_example(f"img{i}", image) for i, image in enumerate(pixels)]
        for signature, generator in directions:
            output = signature(images=tf.constant(pixels))
            expected = _translations(generator, parse, records)
            np.testing.assert_allclose(output["images"].numpy(), expected, atol=ATOL)
            np.testing.assert_array_equal(
                output["images_uint8"].numpy(),
                tf.image.convert_image_dtype(output["images"], tf.uint8, saturate=True).numpy(),
            )


def test_png_and_jpeg_files_give_the_training_path_translations(gan_export):
    model, loaded, parse = gan_export
    rng = np.random.default_rng(6)
    # PNG grey, grey + alpha, RGB, RGBA and JPEG grey, RGB, of different sizes in one batch.
    shapes = ((14, 10, 1), (9, 9, 2), (12, 8, 3), (5, 17, 4), (16, 16, 1), (24, 13, 3))
    files = []
    for n, shape in enumerate(shapes):
        pixels = rng.integers(0, 256, shape, dtype=np.uint8)
        files.append(_image_file(pixels, "JPEG" if n >= 4 else "PNG"))
    # Records as the pairs job writes them in encoded storage.
    records = [
        encoded_image_example(f"img{i}", data, ImageStorage(mode="encoded"))
        for i, data in enumerate(files)
    ]
    for name, generator in (
        ("x_to_y_encoded", model.generator_xy),
        ("y_to_x_encoded", model.generator_yx),
    ):
        output = loaded.signatures[name](images=tf.constant(files))
        expected = _translations(generator, parse, records)
        np.testing.assert_allclose(output["images"].numpy(), expected, atol=ATOL)
        alone = loaded.signatures[name](images=tf.constant(files[-1:]))["images"].numpy()
        np.testing.assert_allclose(alone, expected[-1:], atol=ATOL)


def test_float_signatures_are_the_generators(gan_export):
    model, loaded, _ = gan_export
    images = tf.random.stateless_uniform([3, *model.image_shape], seed=[7, 0])
    for name, generator in (("x_to_y", model.generator_xy), ("y_to_x", model.generator_yx)):
        output = loaded.signatures[name](images=images)["images"].numpy()
        np.testing.assert_allclose(output, generator(images, training=False).numpy(), atol=ATOL)


def test_an_undecodable_image_is_an_error(gan_export):
    _, loaded, _ = gan_export
    files = tf.constant([_image_file(np.zeros([4, 4, 1], np.uint8), "PNG"), b"not an image"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unknown image file format"):
        loaded.signatures["x_to_y_encoded"](images=files)
