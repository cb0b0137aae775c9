"""WAV files parsed and decoded in the graph, as libsndfile decodes them for the audio job.

`decode_wav` walks the RIFF chunks (a `fmt ` and a `data` chunk wherever they are, past `LIST`,
`fact`, `PEAK` or `JUNK` chunks) and converts the samples to float32 as libsndfile reads them
(`soundfile.read(dtype="float32")`, what `tfx_dynamic_inputs.materialize.audio` mixes and
resamples): 8-bit unsigned (v - 128) / 128, 16/24/32-bit signed integers / 2^(bits - 1), 32-bit
float as it is, 64-bit float rounded to float32; format code 1 (PCM), 3 (IEEE float) or 0xFFFE
(WAVE_FORMAT_EXTENSIBLE) of those two; any channel count. Anything else (A-law, mu-law, ADPCM,
MP3 in a WAV, RF64, big-endian RIFX) is refused in one line naming what is accepted.

Memory follows the bytes a client sent, never what a header claims: sizes are clipped to the
file, a `data` chunk that declares more than the file holds is refused as truncated (as the audio
job refuses it), and audio past `MAX_AUDIO_SECONDS` or at a rate outside
[`MIN_SAMPLE_RATE`, `MAX_SAMPLE_RATE`] is refused before a sample is decoded: the audio job's
default limits (`materialize.config`, which this module does not import: it needs Beam; tests
check the two agree).

Pure TensorFlow.
"""

from __future__ import annotations

import tensorflow as tf

MAX_AUDIO_SECONDS = 600.0
MIN_SAMPLE_RATE = 1000
MAX_SAMPLE_RATE = 768000
ACCEPTED_WAV = (
    "WAV of 8-bit unsigned, 16/24/32-bit integer or 32/64-bit float samples (format PCM, "
    "IEEE float or EXTENSIBLE of those), any channel count, at 1000 to 768000 Hz, up to "
    f"{MAX_AUDIO_SECONDS:g} s"
)

# A chunk walk stops here: each step is a loop iteration, and real files hold a handful.
_MAX_CHUNKS = 1024
_FMT_BYTES = 40  # the `fmt ` chunk of WAVE_FORMAT_EXTENSIBLE; plain PCM uses its first 16
_UNKNOWN_LENGTH = 0xFFFFFFFF  # a streamed WAV's data size: "until the end of the file"
_PCM, _IEEE_FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE
# WAVE_FORMAT_EXTENSIBLE's SubFormat GUID after its 2-byte format code (KSDATAFORMAT_SUBTYPE_*).
_SUBFORMAT_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
# (format code, bits per sample) of each sample kind, in `_to_float` branch order.
_SAMPLE_KINDS = (
    (_PCM, 8),
    (_PCM, 16),
    (_PCM, 24),
    (_PCM, 32),
    (_IEEE_FLOAT, 32),
    (_IEEE_FLOAT, 64),
)
# First bytes of the formats a client may send instead, to name them in the error.
_CONTAINERS = (
    (0, b"RIFF", 8, b"WAVE", "WAV"),
    (0, b"fLaC", 0, b"", "FLAC"),
    (0, b"OggS", 0, b"", "Ogg (Vorbis or Opus)"),
    (0, b"ID3", 0, b"", "MP3"),
    (4, b"ftyp", 0, b"", "MP4 (M4A/AAC)"),
    (0, b"RF64", 0, b"", "RF64"),
    (0, b"RIFX", 0, b"", "big-endian RIFX WAV"),
    (0, b"FORM", 0, b"", "AIFF"),
    (0, b"caff", 0, b"", "CAF"),
    (0, b"\x1aE\xdf\xa3", 0, b"", "WebM/Matroska"),
)


def container_name(data: tf.Tensor) -> tf.Tensor:
    """The format a file's first bytes name ("WAV", "FLAC", "MP3", ...), or "" if none.

    Args:
        data: tf.string scalar, the file.

    Returns:
        tf.string scalar.
    """
    # The first 12 bytes, zero-padded: substr past the end of a shorter file is an error.
    head = tf.strings.substr(data, 0, 12) + bytes(12)
    name = tf.constant("")
    for offset, magic, second_offset, second_magic, what in reversed(_CONTAINERS):
        found = tf.equal(tf.strings.substr(head, offset, len(magic)), magic)
        if second_magic:
            found = tf.logical_and(
                found,
                tf.equal(tf.strings.substr(head, second_offset, len(second_magic)), second_magic),
            )
        name = tf.where(found, what, name)
    # MPEG audio frames without an ID3 tag open with 11 set sync bits.
    sync = _bytes(head, 0, 2)
    mpeg = tf.logical_and(tf.equal(sync[0], 0xFF), tf.greater_equal(sync[1], 0xE0))
    return tf.where(tf.logical_and(tf.equal(name, ""), mpeg), "MP3", name)


def first_bytes(data: tf.Tensor) -> tf.Tensor:
    """The first 12 bytes as numbers in text ("[255 254 ...]"): raw bytes of another format are
    not text, and TensorFlow fails decoding them into an error message instead of raising it."""
    return tf.strings.format("{}", _bytes(data, 0, 12), summarize=12)


def decode_wav(data: tf.Tensor, what: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """A WAV file's samples as libsndfile reads them to float32, and its sample rate.

    Args:
        data: tf.string scalar, a file that opens with RIFF....WAVE.
        what: tf.string scalar naming the file in errors, e.g. "audio item 3".

    Returns:
        `(samples, rate)`: float32 [frames, channels] and int64 scalar Hz.

    Raises:
        tf.errors.InvalidArgumentError: (when run) one line: a format or sample width not
            accepted (naming `ACCEPTED_WAV`), no `fmt `/`data` chunk, an inconsistent or truncated
            header, a rate or duration beyond the limits, or NaN or infinite samples.
    """
    size = tf.cast(tf.strings.length(data), tf.int64)
    fmt_at, fmt_size, data_at, data_size, chunks = _walk_chunks(data, size)
    fmt = _bytes(data, tf.minimum(fmt_at, size), _FMT_BYTES)
    tag, channels, block_align, bits = _u16(fmt, 0), _u16(fmt, 2), _u16(fmt, 12), _u16(fmt, 14)
    rate = _u16(fmt, 4) + 65536 * _u16(fmt, 6)
    guid_tail = tf.constant(list(_SUBFORMAT_GUID_TAIL), tf.int64)
    extensible = tf.logical_and(tf.equal(tag, _EXTENSIBLE), fmt_size >= _FMT_BYTES)
    guid_known = tf.reduce_all(tf.equal(fmt[26:40], guid_tail))
    code = tf.where(extensible, tf.where(guid_known, _u16(fmt, 24), tf.constant(-1, tf.int64)), tag)
    kind = tf.constant(-1, tf.int64)
    for index, (kind_code, kind_bits) in enumerate(_SAMPLE_KINDS):
        match = tf.logical_and(tf.equal(code, kind_code), tf.equal(bits, kind_bits))
        kind = tf.where(match, tf.constant(index, tf.int64), kind)
    available = tf.maximum(size - data_at, 0)
    declared = tf.where(tf.equal(data_size, _UNKNOWN_LENGTH), available, data_size)
    frames = tf.minimum(declared, available) // tf.maximum(block_align, 1)
    problem = first_problem(
        what,
        (tf.greater_equal(chunks, _MAX_CHUNKS), f"a WAV of more than {_MAX_CHUNKS} chunks", ()),
        (tf.less(fmt_at, 0), "a WAV without a fmt chunk", ()),
        (fmt_at + 16 > size, "a truncated WAV: its fmt chunk runs past the end of the file", ()),
        (
            tf.less(fmt_size, 16),
            "a WAV whose fmt chunk holds {} bytes, not 16 or more",
            (fmt_size,),
        ),
        (
            tf.less(kind, 0),
            "a WAV of format code {} (1: PCM, 3: float, 65534: extensible) and {}-bit samples, "
            f"not accepted; the model takes {ACCEPTED_WAV}",
            (tf.where(extensible, tf.where(guid_known, code, tag), tag), bits),
        ),
        (
            tf.logical_or(tf.less(channels, 1), tf.not_equal(block_align, channels * bits // 8)),
            "a WAV whose header is inconsistent: {} channels of {} bits in blocks of {} bytes",
            (channels, bits, block_align),
        ),
        (tf.less(data_at, 0), "a WAV without a data chunk (cut short?)", ()),
        (
            tf.logical_or(rate < MIN_SAMPLE_RATE, rate > MAX_SAMPLE_RATE),
            f"a WAV at {{}} Hz, outside {MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE} Hz",
            (rate,),
        ),
        (
            tf.greater(declared, available),
            "a truncated WAV: its header declares {} bytes of audio, the file holds {}",
            (declared, available),
        ),
        (
            tf.greater(tf.cast(frames, tf.float64), MAX_AUDIO_SECONDS * tf.cast(rate, tf.float64)),
            f"{{}} frames at {{}} Hz, longer than the {MAX_AUDIO_SECONDS:g} s the model takes",
            (frames, rate),
        ),
    )
    with tf.control_dependencies([assert_no_problem(problem)]):
        payload = tf.strings.substr(data, data_at, frames * block_align)
    samples = tf.reshape(_to_float(payload, kind), tf.stack([frames, channels]))
    finite = tf.reduce_all(tf.math.is_finite(samples))
    problem = first_problem(what, (tf.logical_not(finite), "a WAV of NaN or infinite samples", ()))
    with tf.control_dependencies([assert_no_problem(problem)]):
        return tf.identity(samples), rate


def _walk_chunks(data: tf.Tensor, size: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """(fmt offset, fmt size, data offset, data size, chunks walked): offsets of the chunks'
    contents, -1 where a chunk is not found; stops when both are found or the file ends."""
    minus_one, zero = tf.constant(-1, tf.int64), tf.constant(0, tf.int64)

    def more(offset, fmt_at, fmt_size, data_at, data_size, chunks):
        missing = tf.logical_or(fmt_at < 0, data_at < 0)
        return tf.logical_and(tf.logical_and(offset + 8 <= size, missing), chunks < _MAX_CHUNKS)

    def step(offset, fmt_at, fmt_size, data_at, data_size, chunks):
        header = _bytes(data, offset, 8)
        chunk_id = tf.strings.substr(data, offset, 4)
        chunk_size = _u32(header, 4)
        is_fmt = tf.logical_and(tf.equal(chunk_id, b"fmt "), fmt_at < 0)
        is_data = tf.logical_and(tf.equal(chunk_id, b"data"), data_at < 0)
        return (
            offset + 8 + chunk_size + chunk_size % 2,  # chunks are padded to even sizes
            tf.where(is_fmt, offset + 8, fmt_at),
            tf.where(is_fmt, chunk_size, fmt_size),
            tf.where(is_data, offset + 8, data_at),
            tf.where(is_data, chunk_size, data_size),
            chunks + 1,
        )

    start = (tf.constant(12, tf.int64), minus_one, zero, minus_one, zero, zero)
    return tf.while_loop(more, step, start)[1:]


def _to_float(payload: tf.Tensor, kind: tf.Tensor) -> tf.Tensor:
    """float32 [n] of the payload's samples, converted as libsndfile converts them to float."""

    def unsigned_8():
        return (tf.cast(tf.io.decode_raw(payload, tf.uint8), tf.float32) - 128.0) / 128.0

    def signed(dtype: tf.DType, scale: float):
        return lambda: tf.cast(tf.io.decode_raw(payload, dtype), tf.float32) / scale

    def signed_24():
        triples = tf.cast(tf.reshape(tf.io.decode_raw(payload, tf.uint8), [-1, 3]), tf.int32)
        value = triples[:, 0] + 256 * triples[:, 1] + 65536 * triples[:, 2]
        value = tf.where(value >= 1 << 23, value - (1 << 24), value)
        return tf.cast(value, tf.float32) / float(1 << 23)

    def floats(dtype: tf.DType):
        return lambda: tf.cast(tf.io.decode_raw(payload, dtype), tf.float32)

    branches = [
        unsigned_8,
        signed(tf.int16, float(1 << 15)),
        signed_24,
        signed(tf.int32, float(1 << 31)),
        floats(tf.float32),
        floats(tf.float64),
    ]
    return tf.switch_case(tf.cast(tf.maximum(kind, 0), tf.int32), branches)


def first_problem(what: tf.Tensor, *checks: tuple[tf.Tensor, str, tuple]) -> tf.Tensor:
    """One line: the first failing check's message, or "" when none fails.

    Args:
        what: tf.string scalar naming the file, e.g. "audio item 3".
        *checks: `(failing, template, values)`: a bool scalar, and the message after
            "<what> is " with a `{}` for each of the `values` (tensors).

    Returns:
        tf.string scalar.
    """
    problem = tf.constant("")
    for failing, template, values in reversed(checks):
        pieces = ("{} is " + template).split("{}")
        message = pieces[0]
        for value, piece in zip((what, *values), pieces[1:], strict=True):
            message = message + text(value) + piece
        problem = tf.where(failing, message, problem)
    return problem


def text(value: tf.Tensor) -> tf.Tensor:
    """A scalar as message text: a string as it is (`tf.strings.format` would quote it), a
    number in decimal.

    Args:
        value: a scalar tensor.

    Returns:
        tf.string scalar.
    """
    return value if value.dtype == tf.string else tf.strings.as_string(value)


def assert_no_problem(problem: tf.Tensor) -> tf.Operation:
    """An assertion that fails with `problem` as its one-line message unless it is ""."""
    return tf.debugging.Assert(tf.equal(problem, ""), [problem])


def _bytes(data: tf.Tensor, offset, length: int) -> tf.Tensor:
    """int64 [length]: the bytes at `offset` (at most the file's size), zeros past the end."""
    piece = tf.strings.substr(data, offset, length)
    return tf.cast(tf.io.decode_raw(piece, tf.uint8, fixed_length=length), tf.int64)


def _u16(values: tf.Tensor, at: int) -> tf.Tensor:
    return values[at] + 256 * values[at + 1]


def _u32(values: tf.Tensor, at: int) -> tf.Tensor:
    return _u16(values, at) + 65536 * _u16(values, at + 2)
