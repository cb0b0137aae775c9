"""Every number of the materialize jobs has one bound, checked where the config is made
(`materialize.config`) for the command line, the Python API and the TFX components alike
(issue 46, "wrong error": `--num_shards 10**9`, `--sample_rate 1` and `--max_audio_seconds nan`
were accepted or ended in a traceback).

The command line is driven in this process with generated values: a value inside its bound gets
past the checks to the output folder's (a folder that is not empty: exit status 2 naming it,
before Beam runs), one outside is refused naming its flag; both are one line, never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import math
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.subprocesses import run_python
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli
from tfx_dynamic_inputs.materialize import config, run_audio
from tfx_dynamic_inputs.materialize.config import AudioConfig, PairsConfig, from_flat
from tfx_dynamic_inputs.materialize.errors import MaterializeError

SETTINGS = settings(max_examples=40, deadline=None)
TWO_GIB_RECORD_SECONDS = config._MAX_RECORD_BYTES / (2 * 16000)  # at the default sample rate


def _in(low: float, high: float, *, integer: bool, high_open: bool = False, low_open=False):
    """The rule of a flag whose value must lie in [low, high] (open ends as told)."""

    def accepts(value: float) -> bool:
        if integer and not isinstance(value, int):
            return False
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        return math.isfinite(value) and above and below

    return accepts


SHARED = {
    "num_shards": (int, _in(0, config.MAX_NUM_SHARDS, integer=True)),
    "max_shard_bytes": (int, _in(1, config.MAX_SHARD_BYTES, integer=True)),
    "files_per_batch": (int, _in(1, config.MAX_FILES_PER_BATCH, integer=True)),
    "max_reject_fraction": (float, _in(0, 1, integer=False)),
}
# With the other flags at their defaults (so `min_input_sample_rate` may not pass 768000, the
# default maximum, and `max_audio_seconds` is bounded by records under 2 GiB at 16 kHz).
BOUNDS = {
    "audio": {
        **SHARED,
        "sample_rate": (
            int,
            _in(config.MIN_STORED_SAMPLE_RATE, config.MAX_STORED_SAMPLE_RATE, integer=True),
        ),
        "eval_fraction": (float, _in(0, 1, integer=False, high_open=True)),
        "split_seed": (int, _in(0, config.MAX_SPLIT_SEED, integer=True)),
        "max_audio_seconds": (
            float,
            _in(0.05, TWO_GIB_RECORD_SECONDS, integer=False, low_open=True),
        ),
        "min_input_sample_rate": (int, _in(1, config.MAX_INPUT_SAMPLE_RATE, integer=True)),
        "max_input_sample_rate": (
            int,
            _in(config.MIN_INPUT_SAMPLE_RATE, config.MAX_DECLARED_SAMPLE_RATE, integer=True),
        ),
    },
    "pairs": {
        **SHARED,
        "raw_height": (int, _in(1, config.PILLOW_MAX_IMAGE_PIXELS, integer=True)),
        "raw_width": (int, _in(1, config.PILLOW_MAX_IMAGE_PIXELS, integer=True)),
        "raw_channels": (int, lambda value: value in config.RAW_CHANNELS),
        "max_image_pixels": (int, _in(1, config.PILLOW_MAX_IMAGE_PIXELS, integer=True)),
    },
}
EDGES = [
    "nan", "inf", "-inf", "0", "-0", "-1", "1", "1.5", "0.999", "1e9", "10**9", "", "x",
    "1000000000", str(2**63), str(2**31), "8000", "192000", "192001", "7999", "10000", "10001",
    "4096", "4097", "178956970", "178956971", str(1 << 36), str((1 << 36) + 1), "0.05", "1e400",
]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(EDGES),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=6),
)


@pytest.fixture(scope="module")
def job_flags(tmp_path_factory) -> dict[str, list[str]]:
    """Each job's required flags over inputs that pass the checks, into a folder that is not
    empty (a value that passes its bound stops there, before Beam)."""
    root = tmp_path_factory.mktemp("bounds")
    for folder in ("x", "y", "audio/speaker", "out"):
        (root / folder).mkdir(parents=True)
    for image in ("x/a.png", "y/a.png"):
        (root / image).write_bytes(b"not read: the job never runs")
    (root / "pairs.jsonl").write_text("")
    (root / "manifest.csv").write_text("path,speaker\n")
    (root / "out" / "mine.txt").write_text("the user's")
    out = ("--output_dir", str(root / "out"))
    return {
        "pairs": ["pairs", "--x_dir", str(root / "x"), "--y_dir", str(root / "y"),
                  "--pairs", str(root / "pairs.jsonl"), *out],
        "audio": ["audio", "--root", str(root / "audio"),
                  "--manifest", str(root / "manifest.csv"), *out],
    }  # fmt: skip


def _cli(argv: list[str]) -> tuple[int, str]:
    """The CLI's exit status (a return or argparse's exit) and its stderr, run in-process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            status = materialize_cli.main(argv)
        except SystemExit as exit_:
            status = exit_.code
    return status, err.getvalue()


def _parsed(text: str, kind: type) -> float | None:
    """What argparse makes of `text` for a flag of `kind`; None when it refuses it."""
    try:
        return kind(text)
    except ValueError:
        return None


@SETTINGS
@given(data=st.data(), job=st.sampled_from(sorted(BOUNDS)), text=VALUES)
def test_any_value_of_a_numeric_flag_is_accepted_within_its_bound_or_refused_in_one_line(
    job_flags, data, job, text
):
    flag = data.draw(st.sampled_from(sorted(BOUNDS[job])), label="flag")
    kind, accepts = BOUNDS[job][flag]
    status, err = _cli([*job_flags[job], f"--{flag}={text}"])
    assert status == 2 and err.count("\n") == 1, err
    assert "Traceback" not in err
    value = _parsed(text, kind)
    if value is not None and accepts(value):
        assert "is not empty" in err, err
    else:
        assert flag in err and "is not empty" not in err, err


@pytest.mark.parametrize(
    "job, flag, value, message",
    [
        ("pairs", "num_shards", "1000000000", "--num_shards must be an integer in [0, 10000]"),
        ("audio", "num_shards", "1000000000", "--num_shards must be an integer in [0, 10000]"),
        ("audio", "sample_rate", "1", "--sample_rate must be an integer in [8000, 192000]"),
        ("audio", "max_audio_seconds", "nan", "max_audio_seconds must be a number above"),
        ("audio", "num_shards", "nan", "--num_shards: expected an int, got 'nan'"),
        ("pairs", "raw_channels", "2", "--raw_channels must be one of 1, 3, 4; got 2"),
        ("audio", "split_seed", "-1", "--split_seed must be an integer in [0, "),
    ],
)
def test_the_issues_values_are_one_line_naming_the_bound(job_flags, job, flag, value, message):
    status, err = _cli([*job_flags[job], f"--{flag}", value])
    assert status == 2 and err.count("\n") == 1 and message in err, err


def test_refusals_come_before_beam_or_tensorflow_load(job_flags):
    cases = [
        [*job_flags["pairs"], "--num_shards", "1000000000"],
        [*job_flags["audio"], "--sample_rate", "1"],
        [*job_flags["audio"], "--max_audio_seconds", "nan"],
        [*job_flags["audio"], "--files_per_batch", "inf"],
    ]
    script = (
        "import contextlib, sys\n"
        "from tfx_dynamic_inputs.materialize.__main__ import main\n"
        "def status(argv):\n"
        "    try:\n"
        "        return main(argv)\n"
        "    except SystemExit as exit_:\n"
        "        return exit_.code\n"
        f"statuses = [status(argv) for argv in {cases!r}]\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'apache_beam'})\n"
        "print(statuses, heavy)\n"
    )
    done = run_python(script, timeout=120)
    assert done.stdout.strip() == f"{[2] * len(cases)} []", done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == len(cases) and all(": error: " in line for line in lines), done.stderr


NUMBERS = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from([10**9, 2**63, -1, 0, 1, math.nan, math.inf]),
)


@SETTINGS
@given(data=st.data(), job=st.sampled_from(sorted(BOUNDS)), value=NUMBERS)
def test_the_python_api_takes_the_same_bounds_and_refuses_other_types(job_flags, data, job, value):
    """`from_flat` is how the TFX components make their config; the same `validate` runs in
    `run_pairs` / `run_audio`. A bool or a float where an integer is owed is refused too."""
    flag = data.draw(st.sampled_from(sorted(BOUNDS[job])), label="flag")
    kind, accepts = BOUNDS[job][flag]
    flags = job_flags[job]
    values = {name[2:]: flags[i + 1] for i, name in enumerate(flags) if name.startswith("--")}
    made = from_flat(AudioConfig if job == "audio" else PairsConfig, {**values, flag: value})
    right_type = not isinstance(value, bool) and (kind is float or isinstance(value, int))
    if right_type and accepts(value):
        made.validate()
    else:
        with pytest.raises(MaterializeError, match=flag):
            made.validate()


def test_run_audio_refuses_a_bound_before_it_touches_the_output_folder(tmp_path):
    (tmp_path / "audio").mkdir()
    (tmp_path / "manifest.csv").write_text("path,speaker\n")
    made = AudioConfig(
        root=str(tmp_path / "audio"),
        manifest=str(tmp_path / "manifest.csv"),
        output_dir=str(tmp_path / "out"),
        sharding=config.ShardingConfig(num_shards=10**9),
    )
    with pytest.raises(MaterializeError, match=r"--num_shards must be an integer in \[0, 10000\]"):
        run_audio(made)
    assert not pathlib.Path(tmp_path / "out").exists()


@SETTINGS
@given(fraction=NUMBERS, num_shards=st.integers(-5, 2 * config.MAX_NUM_SHARDS))
def test_the_index_job_takes_the_same_bounds(fraction, num_shards):
    """The index component's job shares `ShardingConfig` and the reject fraction's check."""
    from tfx_dynamic_inputs.index_component.indexing import IndexConfig

    made = IndexConfig(
        inputs={"train": "split"},
        output_dir="out",
        label_feature="label",
        sharding=config.ShardingConfig(num_shards=num_shards),
        max_reject_fraction=fraction,
    )
    fraction_ok = not isinstance(fraction, bool) and _in(0, 1, integer=False)(fraction)
    if fraction_ok and 0 <= num_shards <= config.MAX_NUM_SHARDS:
        made.validate()
    else:
        with pytest.raises(MaterializeError, match="max_reject_fraction|num_shards"):
            made.validate()
