"""A part of the library imported without its extra is one ImportError naming the pip install."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers.subprocesses import run_python
from tfx_dynamic_inputs import extras

HAS_BEAM = importlib.util.find_spec("apache_beam") is not None


# Both installs: which modules the message names depends on what is installed.
@pytest.mark.full
def test_require_names_the_missing_modules_and_the_pip_install(monkeypatch):
    monkeypatch.setitem(extras.EXTRA_MODULES, "beam", ("apache_beam", "no_such_module_here"))
    with pytest.raises(extras.MissingExtraError) as error:
        extras.require("beam", "tfx_dynamic_inputs.materialize")
    message = str(error.value)
    assert "\n" not in message
    assert (
        message.startswith("tfx_dynamic_inputs.materialize needs ")
        and "no_such_module_here" in message
    )
    assert "pip install 'tfx-dynamic-inputs[beam]'" in message
    assert ("apache_beam" in message) != HAS_BEAM
    assert isinstance(error.value, ImportError)
    with pytest.raises(KeyError):
        extras.require("gpu", "anything")


@pytest.mark.skipif(HAS_BEAM, reason="the [beam] extra is installed here")
def test_without_beam_importing_the_jobs_says_which_extra():
    done = run_python("import tfx_dynamic_inputs.materialize")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "tfx_dynamic_inputs.extras.MissingExtraError: tfx_dynamic_inputs.materialize needs"
    )
    assert "pip install 'tfx-dynamic-inputs[beam]'" in last


# Both installs: only where the extras are installed could importing the core pull them in.
@pytest.mark.full
def test_the_core_imports_without_beam_or_tfx():
    """What the core install brings (the samplers, the store, open_run) pulls in no extra."""
    script = (
        "import sys\n"
        "import tfx_dynamic_inputs.inputs, tfx_dynamic_inputs.layout, tfx_dynamic_inputs.native\n"
        # Not PIL: Keras imports it where it is installed.
        "extras = ('apache_beam', 'tfx', 'kfp', 'tensorflow_transform', 'soundfile', 'av')\n"
        "print(sorted(m for m in extras if m in sys.modules))\n"
    )
    done = run_python(script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
