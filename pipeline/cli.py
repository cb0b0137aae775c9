"""The pipelines' settings from flags and config files, checked without importing TFX.

Flags are generated from the fields of the config dataclasses, so every field has one and none
can drift: `--<field> VALUE`, parsed by the field's type (int, float, str; bool: `--flag`,
`--no-flag` or `--flag true|false`; mapping: a JSON object; optional: `none`; a tuple of strings:
repeat the flag, one item each, e.g. `--beam_pipeline_args=--direct_running_mode=multi_processing`),
spelled with underscores or dashes alike: the package's flag grammar (`cli_flags`).

A config file (JSON, or YAML for any other suffix; at most 1 MiB, no YAML anchors or aliases,
no key given twice: `config_files`) holds one section per dataclass; every section is optional,
and every section present is checked by whichever command reads the file, so one file drives
`python -m tfx_dynamic_inputs.pipeline.run_local` and `python -m
tfx_dynamic_inputs.kubeflow.runner`::

    speaker:                  # SpeakerConfig fields
      manifest: data/manifest.csv
      audio_root: data/audio
      num_epochs: 20
    cyclegan: {x_dir: x/, y_dir: y/, pairs: pairs.jsonl}    # CycleGanConfig fields
    run: {work_dir: runs/local, enable_cache: true}         # local runs (RUN_SECTION_TYPES)
    kubeflow: {image: REGISTRY/tfx-dynamic-inputs:TAG}      # KubeflowConfig fields

Flags override the file. A bad flag, key or value is a `ConfigError`: one line naming it, which
the commands print as `error: ...` before exiting with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import inspect
import json
import os
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from tfx_dynamic_inputs.cli_flags import (
    FALSE_WORDS,
    TRUE_WORDS,
    BoolFlag,
    FlagError,
    FlagParser,
)
from tfx_dynamic_inputs.pipeline import config, config_files

PIPELINES: dict[str, type] = {
    "cyclegan": config.CycleGanConfig,
    "speaker": config.SpeakerConfig,
}
# The input paths of each pipeline: given all together, or none (the bundled sample data).
DATA_FIELDS = {
    "cyclegan": ("x_dir", "y_dir", "pairs"),
    "speaker": ("manifest", "audio_root"),
}
# CycleGanConfig's fields that pair by group instead of by a pair list.
GROUP_FIELDS = ("groups_from_subfolder", "x_groups", "y_groups")
# SpeakerConfig's field that replaces its manifest by the speaker folders under audio_root.
SPEAKER_FROM_PATH = "speaker_from_path"
RUN_SECTION = "run"
KUBEFLOW_SECTION = "kubeflow"
WORK_DIR = "work_dir"
DEFAULT_WORK_DIR = os.path.join(config.OUTPUT_DIR, "local")
# RunConfig's pipeline_root and metadata_path are not settings of a local run: both live under
# its work_dir, so a second run finds the first one's ML Metadata (and its cache).
_RUN_DERIVED = ("pipeline_root", "metadata_path")


class ConfigError(FlagError):
    """A bad flag, config key or value; the message is one line naming it."""


def fail(error: ConfigError) -> NoReturn:
    """Prints `error: <message>` (one line, no traceback) and exits with status 2.

    Args:
        error: the error to print.

    Raises:
        SystemExit: always, with status 2.
    """
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(2)


@dataclasses.dataclass(frozen=True)
class Section:
    """The keys a config file section takes: `types` (key -> type), `defaults` (key -> the
    value used when neither file nor flag gives one), what messages call the section, and why
    some keys one might expect are not there (`absent`: key -> reason)."""

    noun: str
    types: dict[str, Any]
    defaults: dict[str, Any]
    absent: dict[str, str] = dataclasses.field(default_factory=dict)
    help: dict[str, str] = dataclasses.field(default_factory=dict)


def dataclass_section(cls: type) -> Section:
    """The section of the config dataclass `cls`: its fields, their types and defaults.

    Args:
        cls: a config dataclass, e.g. `config.SpeakerConfig`.

    Returns:
        The `Section`, the class's own fields first (then those of its bases: `--help` lists a
        pipeline's data flags before the settings every pipeline shares); fields without a
        default are left out of `defaults`.
    """
    own = set(cls.__dict__.get("__annotations__", {}))
    fields = sorted(dataclasses.fields(cls), key=lambda field: field.name not in own)
    defaults = {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in fields
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    hints = typing.get_type_hints(cls)
    return Section(
        f"a field of {cls.__name__}",
        {f.name: hints[f.name] for f in fields},
        defaults,
        help=field_help(cls),
    )


def field_help(cls: type) -> dict[str, str]:
    """Each field's sentence from the `Args:` sections of `cls`'s docstring and its bases'.

    The config dataclasses document their fields once, in their docstrings; `--help` shows the
    same sentences, so the two cannot disagree.

    Args:
        cls: a config dataclass.

    Returns:
        field name -> its description (one line), for the fields the docstrings describe.

    Example:
        field_help(config.SpeakerConfig)["eval_fraction"]  # "the share of speakers held ..."
    """
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        found.update(_args_section(inspect.getdoc(klass) or ""))
    return found


def _args_section(doc: str) -> dict[str, str]:
    """`name: text` entries of a Google-style `Args:` section, continuation lines joined."""
    entries: dict[str, str] = {}
    lines = doc.splitlines()
    if "Args:" not in lines:
        return entries
    name = None
    for line in lines[lines.index("Args:") + 1 :]:
        if not line.strip():
            break
        entry = re.match(r"^  (\w+): (.*)$", line)
        if entry:
            name = entry.group(1)
            entries[name] = entry.group(2).strip()
        elif name is not None and line.startswith("    "):
            entries[name] += " " + line.strip()
        else:
            break
    return entries


def _run_section() -> Section:
    run = dataclass_section(config.RunConfig)
    kept = [name for name in run.types if name not in _RUN_DERIVED]
    return Section(
        "a local run setting",
        {WORK_DIR: str, **{name: run.types[name] for name in kept}},
        {WORK_DIR: DEFAULT_WORK_DIR, **{name: run.defaults[name] for name in kept}},
        {name: f"a local run keeps it under {WORK_DIR}" for name in _RUN_DERIVED},
        help={
            WORK_DIR: "the folder of the run's pipeline root and sqlite ML Metadata",
            **{name: run.help[name] for name in kept if name in run.help},
        },
    )


SECTIONS: dict[str, Section] = {
    **{name: dataclass_section(cls) for name, cls in PIPELINES.items()},
    RUN_SECTION: _run_section(),
    KUBEFLOW_SECTION: dataclass_section(config.KubeflowConfig),
}


def _did_you_mean(word: str, choices: Sequence[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


_SCALARS = {int: "an int", float: "a float", bool: "a bool (true/false)", str: "a string"}


def _type_name(tp: Any) -> str:
    """How messages name the field type `tp`; TypeError for a type `convert` cannot parse."""
    if _optional_of(tp) is not None:
        return f"{_type_name(_optional_of(tp))} or none"
    origin = typing.get_origin(tp)
    if origin is tuple and typing.get_args(tp) == (str, ...):
        return "a list of strings"
    if origin in (dict, Mapping):
        values = typing.get_args(tp)[1:]
        if values and dataclasses.is_dataclass(values[0]):
            return f"a mapping of names to {_type_name(values[0])}"
        return "a mapping (a JSON object)"
    if dataclasses.is_dataclass(tp):
        return f"a mapping of {tp.__name__} fields"
    if tp in _SCALARS:
        return _SCALARS[tp]
    raise TypeError(f"config fields of type {tp!r} have no flag parser")


def _optional_of(tp: Any) -> Any:
    """X for `X | None`, else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def convert(tp: Any, value: Any, where: str) -> Any:
    """`value` as the field type `tp`, or a ConfigError naming `where`.

    Text is parsed (a flag's value; also a YAML scalar such as `1e-3`, which YAML 1.1 reads as
    a string); other values must already have the type (ints pass as floats, bools never pass
    as numbers).

    Args:
        tp: the field's type: int, float, bool, str, `tuple[str, ...]`, a mapping, or one of
            those `| None`.
        value: a flag's text, or a value from a config file.
        where: what the message names, e.g. "--num_epochs".

    Returns:
        The value as `tp`.

    Raises:
        ConfigError: when `value` is not a `tp`.

    Example:
        convert(int | None, "none", "--max_steps")  # None
    """
    inner = _optional_of(tp)
    if inner is not None:
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        return convert(inner, value, where)
    bad = ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    origin = typing.get_origin(tp)
    if origin is tuple:
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise bad
    if origin in (dict, Mapping) or dataclasses.is_dataclass(tp):
        if isinstance(value, str):
            try:
                value = config_files.parse_json(value)
            except config_files.RefusedContent as error:
                raise ConfigError(f"{where}: {error}") from None
            except config_files.ConfigFileError:
                raise bad from None
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise bad
        if dataclasses.is_dataclass(tp):
            return _dataclass_value(tp, value, where)
        item_type = (typing.get_args(tp)[1:] or (Any,))[0]
        if dataclasses.is_dataclass(item_type):
            return {k: _dataclass_value(item_type, v, f"{where} {k!r}") for k, v in value.items()}
        return dict(value)
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in TRUE_WORDS + FALSE_WORDS:
            return value.lower() in TRUE_WORDS
        raise bad
    # int or float (`_type_name` has refused every other type).
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise bad
    if isinstance(value, float) and tp is int:
        raise bad
    try:
        return tp(value)
    except ValueError:
        raise bad from None


def _dataclass_value(cls: type, value: Any, where: str) -> Any:
    """The dataclass `cls` from the mapping `value`, each field converted; its own checks'
    ValueError, an unknown key (with "did you mean") or a bad value is a ConfigError."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping of {cls.__name__} fields, got {value!r}")
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    for key in value:
        if key not in fields:
            raise ConfigError(
                f"{where}: {key!r} is not a field of {cls.__name__}{_did_you_mean(key, fields)}"
            )
    converted = {k: convert(hints[k], v, f"{where} {k!r}") for k, v in value.items()}
    try:
        return cls(**converted)
    except (ValueError, TypeError) as error:  # the dataclass's own checks
        raise ConfigError(f"{where}: {error}") from None


def check_section(name: str, values: Any) -> dict[str, Any]:
    """The checked (converted) keys of section `name` of a config file.

    Args:
        name: the section's name, a key of `SECTIONS` ("speaker", "run", ...).
        values: the section as the file holds it.

    Returns:
        key -> value, each converted to its field's type.

    Raises:
        ConfigError: when `values` is not a mapping, or a key is unknown or its value bad.
    """
    section = SECTIONS[name]
    if not isinstance(values, dict):
        raise ConfigError(f"config section {name!r}: expected a mapping, got {values!r}")
    checked = {}
    for key, value in values.items():
        if key not in section.types:
            hint = (
                f" ({section.absent[key]})"
                if key in section.absent
                else _did_you_mean(str(key), list(section.types))
            )
            raise ConfigError(f"config key {key!r} is not {section.noun}{hint}")
        checked[key] = convert(section.types[key], value, f"config key {key!r} ({name})")
    return checked


def load_file(path: str) -> dict[str, dict[str, Any]]:
    """Section -> checked keys of the config file at `path` (JSON for `.json`, else YAML; read
    strictly, `config_files.read_config_file`: at most 1 MiB, no YAML anchors or aliases, no key
    given twice).

    Args:
        path: the config file.

    Returns:
        Section name -> its checked keys; {} for an empty file.

    Raises:
        ConfigError: when the file cannot be read or parsed, is refused (too large, an alias, a
            duplicate key), or holds an unknown section, key or bad value.

    Example:
        load_file("config.yaml").get("speaker", {})  # e.g. {"num_epochs": 20}
    """
    try:
        data = config_files.read_config_file(path)
    except OSError as error:
        raise ConfigError(f"--config {path}: {error.strerror}") from None
    except config_files.ConfigFileError as error:
        raise ConfigError(f"--config {path}: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected sections {sorted(SECTIONS)}, got {data!r}")
    for name in data:
        if name not in SECTIONS:
            raise ConfigError(
                f"config key {name!r} is not a section ({', '.join(sorted(SECTIONS))})"
                + _did_you_mean(str(name), list(SECTIONS))
            )
    return {name: check_section(name, values) for name, values in data.items()}


def _help_text(sentence: str | None, tp: Any, default: str) -> str:
    kind = f"{_type_name(tp)}; default: {default}"
    return f"{sentence[:1].upper()}{sentence[1:].rstrip('.')} ({kind})." if sentence else kind


def _add_field_flags(parser: argparse.ArgumentParser, section_name: str) -> None:
    section = SECTIONS[section_name]
    for name, tp in section.types.items():
        default = section.defaults.get(name, "required unless the bundled data is used")
        if not isinstance(default, str):
            default = json.dumps(default)
        kwargs: dict[str, Any] = {
            "dest": f"{section_name}.{name}",
            # Absent flags stay out of the namespace, so the file's value (or the default)
            # stands.
            "default": argparse.SUPPRESS,
            # argparse %-formats help texts.
            "help": _help_text(section.help.get(name), tp, default).replace("%", "%%"),
        }
        if typing.get_origin(tp) is tuple:
            kwargs.update(action="append", metavar="ARG")
            kwargs["help"] += " (repeat the flag, one item each: --flag=--beam-option=value)"
        elif tp is bool:
            kwargs["action"] = BoolFlag
        elif typing.get_origin(tp) in (dict, Mapping):
            kwargs["metavar"] = "JSON"
        else:
            kwargs["metavar"] = {int: "INT", float: "FLOAT"}.get(_optional_of(tp) or tp, "STR")
        parser.add_argument(f"--{name}", **kwargs)


def local_parser() -> FlagParser:
    """`python -m tfx_dynamic_inputs.pipeline.run_local {cyclegan,speaker} ...`: one subcommand per
    pipeline, a flag per field of its config and per local run setting, and `--verbose`."""
    parser = FlagParser(
        prog="python -m tfx_dynamic_inputs.pipeline.run_local",
        description="Run one pipeline locally (LocalDagRunner, sqlite ML Metadata, Beam "
        "DirectRunner), then print what ran, the artifacts, the rejects and the metrics.",
    )
    pipelines = parser.add_subparsers(dest="pipeline", required=True, metavar="PIPELINE")
    for name, cls in PIPELINES.items():
        data = _data_flags(name)
        sub = pipelines.add_parser(
            name,
            help=f"{cls.__name__}: {data} (all, or none for the bundled sample data)",
            description=f"{cls.__name__} flags: give {data} together, or none of them to run "
            "on the bundled sample data. Flags override --config.",
        )
        sub.add_argument("--config", metavar="FILE", help="JSON or YAML config file")
        _add_field_flags(sub, name)
        _add_field_flags(sub, RUN_SECTION)
        sub.add_verbose_flag()
    return parser


def _data_flags(pipeline: str) -> str:
    *first, last = [f"--{field}" for field in DATA_FIELDS[pipeline]]
    return f"{', '.join(first)} and {last}"


@dataclasses.dataclass(frozen=True)
class LocalArgs:
    """A checked local run: `settings` are the pipeline config's fields set by the file or
    flags (the rest keep their defaults); `run` every local run setting; `verbose` whether the
    libraries' notices are shown (`cli_flags.quiet`)."""

    pipeline: str
    settings: dict[str, Any]
    run: dict[str, Any]
    verbose: bool = False

    @property
    def bundled_data(self) -> bool:
        """Whether no data path was given: the run uses the bundled sample data."""
        return not set(DATA_FIELDS[self.pipeline]) & set(self.settings)


def parse_local_args(argv: Sequence[str] | None = None) -> LocalArgs:
    """The run `argv` asks for: file sections, then flags over them; raises ConfigError.

    Args:
        argv: the arguments without the program name; None reads `sys.argv`.

    Returns:
        The `LocalArgs`.

    Raises:
        ConfigError: for an unknown flag or argument, a bad value, or data paths given only
            in part.

    Example:
        parse_local_args(["speaker", "--num_epochs", "2"]).settings  # {"num_epochs": 2}
    """
    try:
        namespace = local_parser().parse_args(argv)
    except FlagError as error:
        raise ConfigError(str(error)) from None
    flags = vars(namespace)
    pipeline = flags.pop("pipeline")
    path = flags.pop("config", None)
    verbose = flags.pop("verbose")
    sections = load_file(path) if path else {}
    given: dict[str, dict[str, Any]] = {pipeline: {}, RUN_SECTION: {}}
    for dest, value in flags.items():
        section_name, name = dest.split(".")
        where = f"--{name}"
        given[section_name][name] = convert(SECTIONS[section_name].types[name], value, where)
    settings = {**sections.get(pipeline, {}), **given[pipeline]}
    data_fields = DATA_FIELDS[pipeline]
    if settings.get(SPEAKER_FROM_PATH):
        # Speakers from the folders under --audio_root: no manifest to give.
        if "manifest" in settings:
            raise ConfigError(
                f"{pipeline}: give --manifest or --{SPEAKER_FROM_PATH} true, not both"
            )
        data_fields = ("audio_root",)
    by_group = [name for name in GROUP_FIELDS if settings.get(name)]
    if pipeline == "cyclegan" and by_group:
        # Pairs by group: the image folders, and no pair list.
        if "pairs" in settings:
            raise ConfigError(f"{pipeline}: give --pairs or --{by_group[0]}, not both")
        data_fields = ("x_dir", "y_dir")
    missing = [field for field in data_fields if field not in settings]
    if 0 < len(missing) < len(data_fields) or (missing and settings.get(SPEAKER_FROM_PATH)):
        raise ConfigError(
            f"{pipeline}: give {_data_flags(pipeline)} together, or none of them for the "
            f"bundled sample data (missing: {', '.join(f'--{field}' for field in missing)})"
        )
    run = {
        **SECTIONS[RUN_SECTION].defaults,
        **sections.get(RUN_SECTION, {}),
        **given[RUN_SECTION],
    }
    return LocalArgs(pipeline, settings, run, verbose)
