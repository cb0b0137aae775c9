"""The settings of `python -m tfx_dynamic_inputs.pipeline.run_local` (and the config file
`tfx_dynamic_inputs.kubeflow.runner` shares): a flag per config field, file then flags, one-line
errors. Nothing here imports TFX."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from tfx_dynamic_inputs.pipeline import cli, config, run_local

# One value per field type: the flag's text and what the field must get.
SAMPLES: dict[Any, tuple[list[str], Any]] = {
    int: (["7"], 7),
    float: (["0.25"], 0.25),
    bool: (["false"], False),
    str: (["some/text"], "some/text"),
    float | None: (["none"], None),
    int | None: (["5"], 5),
    str | None: (["some/dir"], "some/dir"),
    Mapping[str, Any]: (
        ['{"learning_rate": 0.5, "layers": [1, 2]}'],
        {
            "learning_rate": 0.5,
            "layers": [1, 2],
        },
    ),
    tuple[str, ...]: (
        ["--runner=DirectRunner", "--direct_num_workers=2"],
        (
            "--runner=DirectRunner",
            "--direct_num_workers=2",
        ),
    ),
}


def _flags(section: str, skip: frozenset = frozenset()) -> tuple[list[str], dict[str, Any]]:
    """A flag for every key of `section` (but `skip`) with a sample value, and the values
    expected."""
    argv, expected = [], {}
    for name, tp in cli.SECTIONS[section].types.items():
        if name in skip:
            continue
        texts, value = SAMPLES[tp]
        argv += [f"--{name}={text}" for text in texts]
        expected[name] = value
    return argv, expected


@pytest.mark.parametrize("pipeline", sorted(cli.PIPELINES))
def test_every_config_field_and_run_setting_is_a_flag_parsed_by_its_type(pipeline):
    fields = {f.name for f in dataclasses.fields(cli.PIPELINES[pipeline])}
    run_fields = {f.name for f in dataclasses.fields(config.RunConfig)}
    assert set(cli.SECTIONS[pipeline].types) == fields
    assert set(cli.SECTIONS[cli.RUN_SECTION].types) == {cli.WORK_DIR} | run_fields - {
        "pipeline_root",
        "metadata_path",
    }
    # A pair list and groups exclude each other: the group flags are parsed on their own; so is
    # a speaker mix, which excludes the augmentation.
    grouping = frozenset(cli.GROUP_FIELDS) if pipeline == "cyclegan" else frozenset()
    exclusive = grouping if pipeline == "cyclegan" else frozenset({"mix"})
    pipeline_argv, expected = _flags(pipeline, skip=exclusive)
    run_argv, expected_run = _flags(cli.RUN_SECTION)

    args = cli.parse_local_args([pipeline, *pipeline_argv, *run_argv])

    assert args.settings == expected
    assert args.run == expected_run
    assert not args.bundled_data
    # Every key is a field (the sample values are types, not values in the fields' bounds:
    # test_config_fields.py builds configs).
    assert set(args.settings) <= fields
    if grouping:
        by_group = cli.parse_local_args(
            [pipeline, "--x_dir=x", "--y_dir=y", "--x_groups=xg.csv", "--y_groups=yg.csv"]
        )
        assert by_group.settings == {
            "x_dir": "x",
            "y_dir": "y",
            "x_groups": "xg.csv",
            "y_groups": "yg.csv",
        }
        cli.PIPELINES[pipeline](**by_group.settings)
    else:
        mixed = cli.parse_local_args([pipeline, "--mix=corpora.json"])
        assert mixed.settings == {"mix": "corpora.json"}
        cli.PIPELINES[pipeline](**mixed.settings)


def test_without_flags_the_defaults_and_the_bundled_data():
    args = cli.parse_local_args(["speaker"])
    assert args.settings == {}
    assert args.bundled_data
    assert args.run == {
        "work_dir": cli.DEFAULT_WORK_DIR,
        "enable_cache": True,
        "beam_pipeline_args": (),
        "fingerprint_inputs": True,
    }
    assert cli.parse_local_args(["speaker", "--enable_cache"]).run["enable_cache"] is True
    assert cli.parse_local_args(["speaker", "--work-dir", "w"]).run["work_dir"] == "w"


@pytest.mark.parametrize(
    ("tp", "value", "expected"),
    [
        (str | None, "none", None),
        (str | None, None, None),
        (str | None, "x", "x"),
        (int | None, "3", 3),
        (float, 2, 2.0),
        (float, "1e-3", 1e-3),  # YAML 1.1 reads 1e-3 as a string
        (bool, "Yes", True),
    ],
)
def test_values_convert_by_type(tp, value, expected):
    assert cli.convert(tp, value, "--x") == expected


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_file_sections_then_flags_over_them(tmp_path, suffix):
    content = {
        "speaker": {
            "manifest": "data/manifest.csv",
            "audio_root": "data/audio",
            "num_epochs": 5,
            "crop_seconds": "1e-3" if suffix == ".yaml" else 1e-3,
            "custom_config": {"learning_rate": 0.01},
        },
        "cyclegan": {"image_size": 8},  # another pipeline's section: checked, unused
        "run": {"work_dir": "out/x", "beam_pipeline_args": ["--direct_num_workers=2"]},
        "kubeflow": {"image": "registry/image:tag"},
    }
    path = tmp_path / f"config{suffix}"
    path.write_text(json.dumps(content) if suffix == ".json" else yaml.safe_dump(content))

    args = cli.parse_local_args(
        ["speaker", "--config", str(path), "--num_epochs", "9", "--enable_cache=false"]
    )

    assert args.settings == {
        "manifest": "data/manifest.csv",
        "audio_root": "data/audio",
        "num_epochs": 9,
        "crop_seconds": 1e-3,
        "custom_config": {"learning_rate": 0.01},
    }
    assert args.run == {
        "work_dir": "out/x",
        "enable_cache": False,
        "beam_pipeline_args": ("--direct_num_workers=2",),
        "fingerprint_inputs": True,
    }


@pytest.mark.parametrize(
    ("content", "argv", "message"),
    [
        (
            "speaker: {n_clases_per_batch: 4}",
            [],
            "config key 'n_clases_per_batch' is not a field of SpeakerConfig "
            "(did you mean n_classes_per_batch?)",
        ),
        (
            "speakers: {}",
            [],
            "config key 'speakers' is not a section (cyclegan, kubeflow, run, speaker) "
            "(did you mean speaker?)",
        ),
        (
            "run: {pipeline_root: /tmp}",
            [],
            "config key 'pipeline_root' is not a local run setting "
            "(a local run keeps it under work_dir)",
        ),
        (
            "speaker: {num_epochs: many}",
            [],
            "config key 'num_epochs' (speaker): expected an int, got 'many'",
        ),
        (
            "kubeflow: {beam_pipeline_args: --runner=X}",
            [],
            "config key 'beam_pipeline_args' (kubeflow): expected a list of strings, "
            "got '--runner=X'",
        ),
        ("speaker: [1, 2]", [], "config section 'speaker': expected a mapping, got [1, 2]"),
        ("", ["--num_epochs", "x"], "--num_epochs: expected an int, got 'x'"),
        ("", ["--num_epochs=1.5"], "--num_epochs: expected an int, got '1.5'"),
        (
            "",
            ["--enable_cache", "maybe"],
            "--enable_cache: expected a bool (true/false), got 'maybe'",
        ),
        (
            "",
            ["--custom_config", "[1]"],
            "--custom_config: expected a mapping (a JSON object), got '[1]'",
        ),
        (
            "",
            ["--n_clases_per_batch", "3"],
            "unknown flag --n_clases_per_batch (did you mean --n_classes_per_batch?)",
        ),
        (
            "",
            ["--manifest", "m.csv"],
            "speaker: give --manifest and --audio_root together, or none of them for the "
            "bundled sample data (missing: --audio_root)",
        ),
    ],
)
def test_bad_keys_and_values_are_one_line_naming_them(tmp_path, content, argv, message):
    path = tmp_path / "config.yaml"
    path.write_text(content)
    with pytest.raises(cli.ConfigError) as raised:
        cli.parse_local_args(["speaker", "--config", str(path), *argv])
    assert str(raised.value) == message


def test_unreadable_config_files_are_one_line(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("speaker: {num_epochs: 3\nrun: [")
    for path in (broken, tmp_path / "absent.json"):
        with pytest.raises(cli.ConfigError, match=f"^--config {path}: ") as raised:
            cli.parse_local_args(["speaker", "--config", str(path)])
        assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--config", "{config}"],
            "error: config key 'n_clases_per_batch' is not a field of SpeakerConfig "
            "(did you mean n_classes_per_batch?)",
        ),
        (["--num_epochs", "x"], "error: --num_epochs: expected an int, got 'x'"),
        # Checked before TFX loads: was a 15-line FileNotFoundError traceback after 16.7 s.
        (
            ["--audio_root", "{missing}", "--manifest", config.SPEAKER_MANIFEST],
            "error: --audio_root: no such folder: {missing}",
        ),
        (
            ["--manifest", "{missing}", "--audio_root", config.SPEAKER_CORPUS_DIR],
            "error: --manifest: no such file: {missing}",
        ),
    ],
)
def test_the_command_prints_one_line_and_exits_2(tmp_path, argv, line):
    path = tmp_path / "config.yaml"
    path.write_text("speaker:\n  n_clases_per_batch: 4\n")
    names = {"config": path, "missing": tmp_path / "missing"}
    done = subprocess.run(
        [sys.executable, "-m", "tfx_dynamic_inputs.pipeline.run_local", "speaker"]
        + [a.format(**names) for a in argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [line.format(**names)]
    assert done.stdout == ""


def test_local_configs_use_the_bundled_data_without_data_flags(tmp_path):
    work_dir = str(tmp_path)
    cyclegan, run = run_local.local_configs(
        cli.parse_local_args(["cyclegan", "--work_dir", work_dir, "--image_size", "8"])
    )
    assert cyclegan.image_size == 8
    assert cyclegan.x_dir.startswith(os.path.join(work_dir, run_local.DIGITS_DIR))
    assert os.path.isfile(cyclegan.pairs)
    assert run.pipeline_root == os.path.join(work_dir, run_local.PIPELINE_ROOT_DIR)
    assert run.metadata_path == os.path.join(work_dir, run_local.METADATA_FILE)

    speaker, _ = run_local.local_configs(cli.parse_local_args(["speaker"]))
    assert speaker == config.SpeakerConfig()
    speaker, run = run_local.local_configs(
        cli.parse_local_args(
            ["speaker", "--manifest", "m.csv", "--audio_root", "a", "--fingerprint_inputs=no"]
        )
    )
    assert (speaker.manifest, speaker.audio_root) == ("m.csv", "a")
    assert not run.fingerprint_inputs


def test_run_config_takes_every_run_setting_with_runconfigs_own_default(tmp_path):
    """`run_local.run_config`'s keywords are `RunConfig`'s fields besides the two paths it sets,
    each with the default `RunConfig` gives it, so the two cannot drift apart."""
    keywords = {
        name: parameter.default
        for name, parameter in inspect.signature(run_local.run_config).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    fields = {
        field.name: field.default
        for field in dataclasses.fields(config.RunConfig)
        if field.name not in ("pipeline_root", "metadata_path")
    }
    assert keywords == fields
    settings = {
        "enable_cache": False,
        "beam_pipeline_args": ("--direct_num_workers=2",),
        "fingerprint_inputs": False,
    }
    run = run_local.run_config(str(tmp_path), **settings)
    assert {name: getattr(run, name) for name in settings} == settings


def test_the_bundled_cyclegan_config_pairs_by_list_or_by_digit(tmp_path):
    listed = run_local.cyclegan_config(str(tmp_path), image_size=8)
    assert listed.image_size == 8 and os.path.isfile(listed.pairs)
    assert not listed.groups_from_subfolder
    grouped = run_local.cyclegan_config(str(tmp_path), image_size=8, groups_from_subfolder=True)
    assert grouped.pairs is None and grouped.groups_from_subfolder
    assert (grouped.x_dir, grouped.y_dir) == (listed.x_dir, listed.y_dir)
    assert dataclasses.replace(listed, num_epochs=1).num_epochs == 1
    with pytest.raises(ValueError, match="give one pairing"):
        dataclasses.replace(listed, groups_from_subfolder=True)  # two pairings


def test_the_speaker_draw_cap_reaches_the_trainer_from_the_command_line(tmp_path):
    from tfx_dynamic_inputs import component_keys as keys
    from tfx_dynamic_inputs.pipeline import speaker_pipeline

    args = cli.parse_local_args(
        ["speaker", "--work_dir", str(tmp_path), "--max_draws_per_record", "3"]
    )
    speaker, run = run_local.local_configs(args)
    assert speaker.max_draws_per_record == 3
    [trainer] = [
        c
        for c in speaker_pipeline.create_pipeline(speaker, run).components
        if c.id == "ClassBalancedTrainer"
    ]
    options = json.loads(trainer.exec_properties[keys.INPUT_OPTIONS_KEY])
    assert options["max_draws_per_record"] == 3 and options["epoch_mode"] == "samples"
    with pytest.raises(ValueError, match="max_draws_per_record"):
        speaker_pipeline.create_pipeline(dataclasses.replace(speaker, max_draws_per_record=0), run)


def test_cyclegan_pairs_by_group_from_the_command_line(tmp_path):
    """`--groups_from_subfolder true` pairs each x with any y of its folder (the bundled digits'
    classes): no pair list is read, and the materialize component gets the grouping."""
    from tfx_dynamic_inputs import component_keys as keys
    from tfx_dynamic_inputs.pipeline import cyclegan_pipeline

    args = cli.parse_local_args(
        ["cyclegan", "--work_dir", str(tmp_path), "--groups_from_subfolder", "true"]
    )
    gan, run = run_local.local_configs(args)
    assert gan.groups_from_subfolder and gan.pairs is None
    assert gan.input_paths() == [gan.x_dir, gan.y_dir]
    pipeline = cyclegan_pipeline.create_pipeline(gan, run)
    [materialize] = [c for c in pipeline.components if c.id == "MaterializePairs"]
    properties = materialize.exec_properties
    assert properties[keys.GROUPS_FROM_SUBFOLDER_KEY] is True
    assert properties[keys.PAIRS_KEY] is None
    own = run_local.local_configs(
        cli.parse_local_args(
            ["cyclegan", "--x_dir", gan.x_dir, "--y_dir", gan.y_dir, "--groups_from_subfolder", "1"]
        )
    )[0]
    assert own.groups_from_subfolder and own.pairs is None


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--pairs", "p.jsonl", "--groups_from_subfolder", "true"], "give --pairs or --groups"),
        (["--x_groups", "x.csv"], "x_groups and y_groups go together"),
    ],
)
def test_cyclegan_takes_one_pairing(tmp_path, argv, error):
    with pytest.raises(cli.ConfigError, match=error):
        run_local.local_configs(cli.parse_local_args(["cyclegan", *argv]))


@pytest.mark.parametrize("pipeline", ["speaker", "cyclegan"])
def test_every_flag_of_run_local_has_a_sentence_and_its_default(pipeline):
    """The sentences are the config dataclasses' own `Args:` entries (said once)."""
    [subparsers] = [
        a for a in cli.local_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    flags = [a for a in subparsers.choices[pipeline]._actions if a.dest.count(".") == 1]
    section = cli.SECTIONS[pipeline]
    assert {a.dest.split(".")[1] for a in flags} >= set(section.types)
    for action in flags:
        name = action.dest.split(".")[1]
        assert not action.help[0].islower() and "default: " in action.help, action.help
        owner = section if name in section.types else cli.SECTIONS[cli.RUN_SECTION]
        sentence = owner.help[name]
        assert action.help.startswith(sentence[:1].upper() + sentence[1:].rstrip(".")), name
    eval_help = cli.SECTIONS["speaker"].help.get("eval_fraction", "")
    if pipeline == "speaker":
        # The one default that differs from the materialize CLI's says so where it is seen.
        assert "materialize CLI's default is 0.1" in eval_help
