"""Every field of the pipeline configs is checked where the config is built (issue 46, wrong
errors): 13 of 16 bad `run_local` values passed the early checks and 11 ended in tracebacks,
some after the Beam job ran. Generated extremes of every field now give a valid config or one
line naming the field; through `run_local`'s flags, exit status 2 and one line, before TFX."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.pipeline import cli, config, config_checks, run_local

# What a careless user or an attacker writes: non-finite, zero, negative, huge, bools for ints,
# floats for ints, empty or path-like strings, containers.
EXTREMES = st.one_of(
    st.sampled_from(
        [math.nan, math.inf, -math.inf, 0, -1, 1, 0.0, -0.0, 0.5, 1.0, 1.5, 1e308, -1e308]
        + [2**31, 2**32, 2**63, -(2**63) - 1, 10**30, True, False, None]
        + ["", " ", "x", "../x", "a/b", "nan", "samples", [], {}, [1], {"a": math.nan}, {"a": 1}]
    ),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
)
# The required fields of each config class, valid.
BASES = {
    config.SpeakerConfig: {},
    config.CycleGanConfig: {"x_dir": "x", "y_dir": "y", "pairs": "p"},
    config.RunConfig: {"pipeline_root": "root"},
    config.KubeflowConfig: {},
    config.TaskResources: {},
}
FIELDS = [(cls, f.name) for cls in BASES for f in dataclasses.fields(cls)]
_SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _assert_valid_or_one_line(cls: type, name: str, value: object, base: dict) -> None:
    """Builds `cls` with `name=value`: valid, or one line naming `name`."""
    try:
        built = cls(**{**base, name: value})
    except (ValueError, TypeError) as error:
        message = str(error)
        assert "\n" not in message and name in message, message
        return
    # Accepted: of the field's type, finite, in int64 (a bool passes only as a bool).
    accepted = getattr(built, name)
    field_type = config_checks._field_types(cls)[name]
    if isinstance(accepted, bool):
        assert bool in (field_type, config_checks._optional_of(field_type)), (name, value)
    if isinstance(accepted, float):
        assert math.isfinite(accepted), (name, value)
    if isinstance(accepted, int):
        assert -(2**63) <= accepted < 2**63, (name, value)


@_SETTINGS
@given(field=st.sampled_from(FIELDS), value=EXTREMES)
def test_every_field_at_its_extremes_is_a_valid_config_or_one_line_naming_it(field, value):
    cls, name = field
    _assert_valid_or_one_line(cls, name, value, BASES[cls])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"crop_seconds": math.nan}, "SpeakerConfig.crop_seconds must be a finite number, got nan"),
        ({"n_classes_per_batch": 0}, "SpeakerConfig.n_classes_per_batch must be >= 1, got 0"),
        ({"seed": -1}, "SpeakerConfig.seed must be >= 0, got -1"),
        ({"eval_fraction": 1.0}, "SpeakerConfig.eval_fraction must be in [0.0, 1.0), got 1.0"),
        ({"max_draws_per_record": 0}, "SpeakerConfig.max_draws_per_record must be >= 1, got 0"),
        ({"num_epochs": True}, "SpeakerConfig.num_epochs must be an int, got the bool True"),
        (
            {"epoch_mode": "sample"},
            "SpeakerConfig.epoch_mode must be one of classes, samples, got 'sample' (did you "
            "mean 'samples'?)",
        ),
        (
            {"min_snr_db": 5.0, "max_snr_db": 1.0},
            "SpeakerConfig.min_snr_db / max_snr_db must have low <= high",
        ),
        (
            {"noise_dir": "noise", "min_snr_db": -400.0, "max_snr_db": -400.0},
            "SpeakerConfig.min_snr_db / max_snr_db must be within [-100, 100] dB",
        ),
        (
            {"pipeline_name": "../victim"},
            "SpeakerConfig.pipeline_name '../victim' is not a legal Kubeflow pipeline name",
        ),
        ({"custom_config": {"learning_rate": math.inf}}, "SpeakerConfig.custom_config must be"),
        ({"sample_rate": 1}, "SpeakerConfig.sample_rate must be >= 8000, got 1"),
    ],
)
def test_the_reported_speaker_values_are_one_line(fields, message):
    with pytest.raises((ValueError, TypeError)) as refused:
        config.SpeakerConfig(**fields)
    assert str(refused.value).startswith(message)


def test_standard_config_fields_at_their_extremes():
    from tests.pipeline import standard_data

    base = {
        field: getattr(standard_data.config("input"), field)
        for field in ("input_base", "preprocessing_fn", "trainer_module", "label_feature")
    }
    base |= {"n_classes_per_batch": 2, "n_samples_per_class": 2, "blessing_metric": "auc"}
    cls = type(standard_data.config("input"))
    names = [f.name for f in dataclasses.fields(cls)]

    @settings(max_examples=50, deadline=None)
    @given(name=st.sampled_from(names), value=EXTREMES)
    def check(name, value):
        _assert_valid_or_one_line(cls, name, value, base)

    check()


# Flag texts at the extremes; a run stops at a missing input after the config checks, so a
# valid value never starts the pipeline.
FLAG_TEXTS = st.sampled_from(
    ["nan", "inf", "-inf", "0", "-1", "1e400", "99999999999999999999", "-0", "0.0", "1.5"]
    + ["true", "none", "", "../x", "{}", '{"a": NaN}', "2", "samples", "x"]
)
_SPEAKER_FLAGS = sorted(
    set(cli.SECTIONS["speaker"].types) - {"manifest", "audio_root", "speaker_from_path"}
)


@_SETTINGS
@given(name=st.sampled_from(_SPEAKER_FLAGS), text=FLAG_TEXTS)
def test_run_local_flags_at_their_extremes_exit_2_with_one_line(
    tmp_path_factory, capsys, name, text
):
    root = tmp_path_factory.mktemp("run")
    argv = ["speaker", f"--{name}={text}", "--work_dir", str(root / "work")]
    missing = str(root / "missing.csv")
    try:
        run_local.local_configs(cli.parse_local_args(argv))
    except cli.ConfigError as error:
        expected = f"error: {error}"
        assert name in expected
    else:
        expected = f"error: --manifest: no such file: {missing}"
    with pytest.raises(SystemExit) as exited:
        run_local.main([*argv, "--manifest", missing, "--audio_root", str(root)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [expected]


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--crop_seconds", "nan"], "error: SpeakerConfig.crop_seconds must be a finite number"),
        (["--seed", "-1"], "error: SpeakerConfig.seed must be >= 0, got -1"),
        (["--eval_fraction", "1.0"], "error: SpeakerConfig.eval_fraction must be in [0.0, 1.0)"),
    ],
)
def test_the_command_refuses_reported_values_in_one_line_before_tensorflow(tmp_path, flags, line):
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tfx_dynamic_inputs.pipeline.run_local", "speaker", *flags]
        + ["--work_dir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    [printed] = done.stderr.splitlines()  # TensorFlow's import would have printed more
    assert printed.startswith(line)
    assert done.stdout == ""
    assert time.monotonic() - started < 30
