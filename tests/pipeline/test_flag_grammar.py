"""One flag grammar for the four command lines (issue 47, item 3): the same table of mistakes
and spellings runs through `materialize`, `pipeline.run_local`, `kubeflow.runner` and
`data_service_worker`, in this process through their `main(argv)` (mistakes: exit status 2 and
one line) or their parsers (accepted spellings: parsed only, no job runs)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Callable
from typing import Any

import pytest
from absl import logging as absl_logging
from hypothesis import given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs import cli_flags, data_service_worker
from tfx_dynamic_inputs.kubeflow import runner
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli
from tfx_dynamic_inputs.pipeline import cli, config, run_local


@dataclasses.dataclass(frozen=True)
class Command:
    """A CLI as the table drives it: its leading arguments, its `main`, a parse that runs
    nothing, and one flag of each kind with its default (None: it has none of that kind)."""

    name: str
    base: Callable[[Any], list[str]]
    main: Callable[[list[str]], Any]
    parsed: Callable[[list[str]], dict[str, Any]]
    int_flag: str
    int_default: int
    float_flag: str | None
    bool_flag: str
    misspelt: tuple[str, str]


def _materialize_parsed(argv: list[str]) -> dict[str, Any]:
    namespace, unknown = materialize_cli._parser().parse_known_args(argv)
    assert not unknown, unknown
    return vars(namespace)


def _run_local_parsed(argv: list[str]) -> dict[str, Any]:
    args = cli.parse_local_args(argv)
    return {**args.settings, **args.run}


def _runner_parsed(argv: list[str]) -> dict[str, Any]:
    # The runner keeps --verbose to itself: it shows as whether `quiet` silenced absl.
    absl_logging.set_verbosity(absl_logging.INFO)
    kubeflow_config, _, _ = runner.parse_args(argv)
    verbose = absl_logging.get_verbosity() != absl_logging.ERROR
    return {**dataclasses.asdict(kubeflow_config), "verbose": verbose}


def _audio_folder(tmp_path) -> list[str]:
    (tmp_path / "vox").mkdir(exist_ok=True)
    (tmp_path / "vox" / "a.wav").write_bytes(b"")
    return ["audio", "--speaker_from_path", "--root", str(tmp_path / "vox")] + [
        "--output_dir",
        str(tmp_path / "out"),
    ]


COMMANDS = [
    Command(
        "materialize",
        _audio_folder,
        materialize_cli.main,
        _materialize_parsed,
        "num_shards",
        0,
        "eval_fraction",
        "overwrite",
        ("--num_shard", "--num_shards"),
    ),
    Command(
        "run_local",
        lambda tmp_path: ["speaker", "--work_dir", str(tmp_path / "work")],
        run_local.main,
        _run_local_parsed,
        "num_epochs",
        config.SpeakerConfig.num_epochs,
        "crop_seconds",
        "enable_cache",
        ("--num_epoch", "--num_epochs"),
    ),
    Command(
        "kubeflow.runner",
        lambda tmp_path: ["--output-dir", str(tmp_path / "specs")],
        runner.main,
        _runner_parsed,
        "trainer-retries",
        config.KubeflowConfig.trainer_retries,
        None,
        "verbose",
        ("--trainer-retry", "--trainer-retries"),
    ),
    Command(
        "data_service_worker",
        lambda tmp_path: ["--dispatcher_address", "dispatcher:5050"],
        data_service_worker.main,
        lambda argv: dataclasses.asdict(data_service_worker.parse_options(argv)),
        "port",
        0,
        "connect_timeout_seconds",
        "without_native_ops",
        ("--prot", "--port"),
    ),
]
BY_NAME = pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])


@pytest.fixture(autouse=True)
def _quiet_restored(monkeypatch):
    """What `cli_flags.quiet` changes in this process, as it was after each test."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    verbosity = absl_logging.get_verbosity()
    yield
    absl_logging.set_verbosity(verbosity)


def _key(flag: str) -> str:
    return flag.replace("-", "_")


def _other_spelling(flag: str) -> str:
    """The flag spelled with dashes if it has underscores, else with underscores."""
    return flag.replace("_", "-") if "_" in flag else flag.replace("-", "_")


def _status(command: Command, argv: list[str]) -> tuple[Any, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = command.main(argv)
        except SystemExit as exited:
            status = exited.code
    return status, out.getvalue(), err.getvalue()


def _one_line(command: Command, argv: list[str], *expected: str) -> None:
    status, out, err = _status(command, argv)
    assert status == 2, (status, err)
    assert err.count("\n") == 1 and "error: " in err and "usage:" not in err, err
    assert out == "", out
    for text in expected:
        assert text in err, (text, err)


MISTAKES = {
    "a misspelt flag names the closest": lambda c: (
        [f"{c.misspelt[0]}=1"],
        [f"unknown flag {c.misspelt[0]} (did you mean {c.misspelt[1]}?)"],
    ),
    "a bad int": lambda c: (
        [f"--{c.int_flag}", "abc"],
        [f"--{c.int_flag}: expected an int, got 'abc'"],
    ),
    "a bad float": lambda c: (
        [f"--{c.float_flag}", "abc"],
        [f"--{c.float_flag}: expected a float, got 'abc'"],
    ),
    "a missing value": lambda c: ([f"--{c.int_flag}"], [f"--{c.int_flag}:"]),
    "a bool that is neither": lambda c: (
        [f"--{c.bool_flag}", "maybe"],
        [f"--{c.bool_flag}: expected a bool (true/false), got 'maybe'"],
    ),
    "a value after --no-flag": lambda c: (
        [f"--no-{_other_spelling(c.bool_flag)}=true"],
        ["takes no value"],
    ),
}


@BY_NAME
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_mistake_is_one_line_and_status_2(tmp_path, command, mistake):
    if mistake == "a bad float" and command.float_flag is None:
        pytest.skip(f"{command.name} has no float flag")
    argv, expected = MISTAKES[mistake](command)
    _one_line(command, [*command.base(tmp_path), *argv], *expected)


BOOLS = [
    ("{flag}", True),
    ("{flag}=true", True),
    ("{flag}=FALSE", False),
    ("{flag}=no", False),
    ("{flag}=1", True),
    ("--no-{dashed}", False),
    ("--no_{underscored}", False),
]


@BY_NAME
@pytest.mark.parametrize(("spelling", "value"), BOOLS)
def test_booleans_take_no_flag_and_true_or_false(tmp_path, command, spelling, value):
    flag = f"--{command.bool_flag}"
    names = {
        "flag": flag,
        "dashed": command.bool_flag.replace("_", "-"),
        "underscored": _key(command.bool_flag),
    }
    parsed = command.parsed([*command.base(tmp_path), *spelling.format(**names).split(" ")])
    assert parsed[_key(command.bool_flag)] is value
    spaced = command.parsed([*command.base(tmp_path), flag, "false"])
    assert spaced[_key(command.bool_flag)] is False


@BY_NAME
def test_dashes_and_underscores_name_the_same_flag(tmp_path, command):
    for flag in (command.int_flag, _other_spelling(command.int_flag)):
        parsed = command.parsed([*command.base(tmp_path), f"--{flag}", "7"])
        assert parsed[_key(command.int_flag)] == 7, flag


@settings(max_examples=20, deadline=None)
@given(data=st.data(), command=st.sampled_from(COMMANDS))
def test_any_mix_of_dashes_and_underscores_is_the_flag(tmp_path_factory, data, command):
    words = _key(command.int_flag).split("_")
    gaps = len(words) - 1
    separators = data.draw(st.lists(st.sampled_from("-_"), min_size=gaps, max_size=gaps))
    spelt = words[0] + "".join(s + w for s, w in zip(separators, words[1:], strict=True))
    base = command.base(tmp_path_factory.mktemp("mix"))
    assert command.parsed([*base, f"--{spelt}=5"])[_key(command.int_flag)] == 5


@BY_NAME
def test_help_states_the_defaults(tmp_path, command):
    subcommand = command.base(tmp_path)[:1] if command.name in ("materialize", "run_local") else []
    status, out, err = _status(command, [*subcommand, "--help"])
    assert status == 0 and err == "", err
    assert f"default: {command.int_default}" in out, out
    assert f"--{command.bool_flag} [BOOL]" in out and "--no" in out, out
    assert "--verbose" in out


def test_quiet_silences_the_no_action_notices_unless_verbose():
    # Another test in this process may have run a quiet command already: start from absl's
    # default, and put back what was there.
    before = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.INFO)
    try:
        cli_flags.quiet(verbose=True)
        assert absl_logging.get_verbosity() == absl_logging.INFO
        cli_flags.quiet(verbose=False)
        assert absl_logging.get_verbosity() == absl_logging.ERROR
    finally:
        absl_logging.set_verbosity(before)
