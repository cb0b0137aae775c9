"""One bound per option: a bound stated once without TensorFlow (`plans`, `option_bounds`) is the
same object on both sides, and where the pipeline configs still restate a bound of the library
or a job (whose modules import TensorFlow or TFX, which the CLIs must not load before they
answer; `pipeline.config_checks`), a config accepts a generated value exactly when the library
does."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.subprocesses import run_python
from tfx_dynamic_inputs import option_bounds
from tfx_dynamic_inputs.evaluator_component.decision import Rule
from tfx_dynamic_inputs.inputs import AudioFeatureConfig, run_mix, speaker_augment
from tfx_dynamic_inputs.inputs.arguments import SEED_RANGE, int_argument
from tfx_dynamic_inputs.inputs.class_plan import EPOCH_MODES
from tfx_dynamic_inputs.inputs.pair_plan import STRATEGIES
from tfx_dynamic_inputs.materialize.config import AudioConfig, PairsConfig
from tfx_dynamic_inputs.materialize.errors import MaterializeError
from tfx_dynamic_inputs.pipeline import config, config_checks
from tfx_dynamic_inputs.trainer_component.input_options import (
    MIX_WEIGHTINGS,
    ClassBalancedInputOptions,
    PairsInputOptions,
)

_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# Ints of int64: a TFX execution property holds no more, and the configs refuse more whatever
# the library would take.
_INTS = st.one_of(
    st.integers(-3, 5),
    st.integers(*SEED_RANGE),
    st.sampled_from([2**31, 2**32, 2**32 - 1, SEED_RANGE[1]]),
)
_FRACTIONS = st.floats(-0.5, 1.5) | st.sampled_from([0.0, 1.0, math.nextafter(1.0, 0.0)])


def _accepts(build, *errors: type[Exception]) -> bool:
    try:
        build()
    except (ValueError, TypeError, *errors):
        return False
    return True


def test_the_choices_and_the_snr_range_are_stated_once():
    # One definition, TensorFlow-free (`plans`, `option_bounds`), taken by both sides.
    assert config_checks.EPOCH_MODES is EPOCH_MODES
    assert config_checks.PAIRING_STRATEGIES is STRATEGIES
    assert config_checks.MIX_WEIGHTINGS == MIX_WEIGHTINGS
    assert run_mix.MixWeighting is option_bounds.MixWeighting
    assert config_checks.check_snr_range is speaker_augment.check_snr_range
    assert config_checks.INT64_RANGE == SEED_RANGE


@_SETTINGS
@given(
    low=st.floats(allow_nan=True) | st.sampled_from([-100.0, 100.0, -100.5, -400.0, 0.0]),
    high=st.floats(allow_nan=True) | st.sampled_from([-100.0, 100.0, 100.5, 15.0]),
    noise=st.booleans(),
)
def test_an_snr_range_is_accepted_exactly_when_additive_noise_takes_it(low, high, noise):
    fields = {"min_snr_db": low, "max_snr_db": high, "noise_dir": "noise" if noise else None}
    noise_takes = _accepts(lambda: speaker_augment.AdditiveNoise("noise", snr_db=(low, high)))
    assert _accepts(lambda: config.SpeakerConfig(**fields)) == noise_takes


def test_a_noise_config_with_a_bad_snr_fails_in_one_line_before_tensorflow(tmp_path):
    # SpeakerConfig used to build an AdditiveNoise for its noise_dir, importing TensorFlow.
    argv = ["speaker", "--noise_dir", str(tmp_path), "--min_snr_db", "-400"]
    argv += ["--work_dir", str(tmp_path / "work")]
    script = (
        "import sys\n"
        "from tfx_dynamic_inputs.pipeline import run_local\n"
        "try:\n"
        f"    run_local.main({argv!r})\n"
        "except SystemExit as exited:\n"
        "    print(exited.code, 'tensorflow' in sys.modules)\n"
    )
    done = run_python(script, timeout=120)
    assert done.stdout.strip() == "2 False", (done.stdout, done.stderr[-2000:])
    [line] = done.stderr.splitlines()
    assert line.startswith(
        "error: SpeakerConfig.min_snr_db / max_snr_db must be within [-100, 100]"
    )


@_SETTINGS
@given(seed=_INTS)
def test_a_seed_is_accepted_exactly_when_the_trainers_keras_seeding_takes_it(seed):
    # keras.utils.set_random_seed seeds NumPy's legacy generator, whose range this is.
    keras_takes = _accepts(lambda: np.random.RandomState(seed))
    assert _accepts(lambda: config.SpeakerConfig(seed=seed)) == keras_takes


@_SETTINGS
@given(value=_INTS)
def test_batch_geometry_and_draw_caps_are_the_samplers_bounds(value):
    speaker = _accepts(lambda: config.SpeakerConfig(n_classes_per_batch=value))
    assert speaker == _accepts(lambda: int_argument("n_classes_per_batch", value, 1))
    speaker = _accepts(lambda: config.SpeakerConfig(max_draws_per_record=value))
    assert speaker == _accepts(lambda: ClassBalancedInputOptions(max_draws_per_record=value))
    image = {"height": 8, "width": 8, "channels": 1}
    cyclegan = _accepts(
        lambda: config.CycleGanConfig(x_dir="x", y_dir="y", pairs="p", **{"held_out": value})
    )
    assert cyclegan == _accepts(lambda: PairsInputOptions(image=image, held_out=value))


@pytest.fixture(scope="module")
def audio_job(tmp_path_factory) -> dict[str, str]:
    """An audio job's existing inputs, so that its `validate` judges the values alone."""
    root = tmp_path_factory.mktemp("audio")
    (root / "manifest.csv").write_text("path,speaker\n")
    return {"root": str(root), "manifest": str(root / "manifest.csv"), "output_dir": str(root)}


@_SETTINGS
@given(
    rate=st.integers(0, 800_000) | st.sampled_from([7999, 8000, 192000, 192001]),
    eval_fraction=_FRACTIONS,
    reject_fraction=_FRACTIONS,
)
def test_rates_and_fractions_are_the_audio_jobs_bounds(
    audio_job, rate, eval_fraction, reject_fraction
):
    for fields in (
        {"sample_rate": rate},
        {"eval_fraction": eval_fraction},
        {"max_reject_fraction": reject_fraction},
    ):
        job = AudioConfig(**audio_job, **fields)
        speaker = _accepts(lambda fields=fields: config.SpeakerConfig(**fields))
        assert speaker == _accepts(job.validate, MaterializeError), fields


@_SETTINGS
@given(crop=st.floats(-1.0, config_checks.MAX_AUDIO_SECONDS), rate=st.sampled_from([8000, 16000]))
def test_a_crop_is_accepted_exactly_when_the_audio_front_end_takes_it(crop, rate):
    front_end = _accepts(lambda: AudioFeatureConfig(sample_rate=rate, crop_seconds=crop))
    assert _accepts(lambda: config.SpeakerConfig(sample_rate=rate, crop_seconds=crop)) == front_end


@_SETTINGS
@given(bins=_INTS)
def test_mel_bins_are_the_audio_front_ends_bound(bins):
    front_end = _accepts(lambda: AudioFeatureConfig(num_mel_bins=bins))
    assert _accepts(lambda: config.SpeakerConfig(num_mel_bins=bins)) == front_end


@_SETTINGS
@given(size=st.integers(-2, 6000) | st.sampled_from([5792, 5793]), channels=st.integers(-1, 5))
def test_image_size_and_channels_are_the_pairs_jobs_bounds(tmp_path_factory, size, channels):
    folder = str(tmp_path_factory.getbasetemp())
    job = PairsConfig(
        output_dir=folder,
        x_dir=folder,
        y_dir=folder,
        groups_from_subfolder=True,
        image_storage="raw",
        raw_height=size,
        raw_width=size,
        raw_channels=channels,
    )
    fields = {"image_size": size, "channels": channels}
    cyclegan = _accepts(lambda: config.CycleGanConfig(x_dir="x", y_dir="y", pairs="p", **fields))
    assert cyclegan == _accepts(job.validate, MaterializeError)


@_SETTINGS
@given(name=st.text(max_size=70) | st.from_regex(r"[a-z0-9][a-z0-9-]{0,70}", fullmatch=True))
def test_a_pipeline_name_is_accepted_exactly_when_kubeflow_and_tfx_take_it(name):
    from tfx.orchestration.pipeline import _MAX_PIPELINE_NAME_LENGTH

    from tfx_dynamic_inputs.kubeflow.spec_files import PIPELINE_NAME_PATTERN

    both = bool(PIPELINE_NAME_PATTERN.fullmatch(name)) and len(name) <= _MAX_PIPELINE_NAME_LENGTH
    assert _accepts(lambda: config.SpeakerConfig(pipeline_name=name)) == both


@_SETTINGS
@given(
    direction=st.sampled_from(["lower_is_better", "higher_is_better", "up", ""]),
    threshold=st.none() | st.floats(),
    tolerance=st.floats(),
)
def test_the_gate_fields_are_model_gates_rule(direction, threshold, tolerance):
    fields = {
        "blessing_direction": direction,
        "blessing_threshold": threshold,
        "blessing_tolerance": tolerance,
    }
    rule = _accepts(lambda: Rule("eer", direction, threshold, tolerance))
    assert _accepts(lambda: config.SpeakerConfig(**fields)) == rule
