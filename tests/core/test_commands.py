"""`tfx-dynamic-inputs` (tfx_dynamic_inputs.commands), in-process: each command is a module's
`main`, handed the rest of the line unchanged; a missing or unknown command is one line and exit
status 2. The installed script itself runs in tests/smoke/test_wheel_product.py."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

from tests.helpers.installs import CORE_INSTALL
from tfx_dynamic_inputs import commands


@pytest.fixture
def program_name(monkeypatch) -> None:
    """The dispatcher names the command in sys.argv[0]: restored after the test."""
    monkeypatch.setattr(sys, "argv", ["tfx-dynamic-inputs"])


@pytest.mark.full
@pytest.mark.skipif(CORE_INSTALL, reason="most commands' modules need an extra")
def test_every_command_is_a_module_with_a_main_of_argv():
    for name, command in commands.COMMANDS.items():
        module = importlib.import_module(command.module)
        parameters = list(inspect.signature(module.main).parameters)
        assert parameters == ["argv"], (name, parameters)


def test_the_help_lists_every_command_without_importing_tensorflow():
    script = (
        "import sys\n"
        "from tfx_dynamic_inputs import commands\n"
        "assert commands.main(['--help']) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in HEAVY))\n"
    ).replace("HEAVY", repr({"tensorflow", "apache_beam", "tfx", "kfp"}))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    listed, imported = done.stdout.rsplit("\n", 2)[:2]
    for name, command in commands.COMMANDS.items():
        assert f"  {name}" in listed and command.summary in listed
    assert imported == "[]"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "usage: tfx-dynamic-inputs COMMAND"),
        (["run-locl"], "unknown command 'run-locl' (did you mean 'run-local'?)"),
        (["--work_dir", "x"], "unknown command '--work_dir'"),
    ],
)
def test_a_missing_or_unknown_command_is_status_2(argv, expected, capsys):
    assert commands.main(argv) == 2
    assert expected in capsys.readouterr().err


def test_a_command_gets_the_rest_of_the_line_unchanged(capsys, program_name):
    # The worker's own check of its flags answers: one line naming the address, status 2.
    argv = ["--dispatcher_address", "127.0.0.1:99999", "--port", "0"]
    assert commands.main(["data-service-worker", *argv]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "127.0.0.1:99999" in line
    with pytest.raises(SystemExit) as exit_:
        commands.main(["native", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: tfx-dynamic-inputs native [-h]")
