"""The optional parts of the distribution and the `pip install` that brings each.

`pip install tfx-dynamic-inputs` installs the core (TensorFlow and NumPy: the record store, both
samplers, coverage, audio features, `open_run`). The Beam jobs, the TFX components and pipelines,
and the Kubeflow compiler need an extra each; a package that needs one calls `require` first, so
that importing it without the extra is one `ImportError` naming the command that fixes it,
instead of a `ModuleNotFoundError` from deep inside an import chain.
"""

from __future__ import annotations

import importlib.util

DISTRIBUTION = "tfx-dynamic-inputs"
# extra -> the top-level modules it installs that its packages import.
EXTRA_MODULES = {
    "beam": ("apache_beam", "soundfile", "av", "soxr", "PIL"),
    "tfx": ("tfx", "tensorflow_transform", "apache_beam"),
    "kubeflow": ("tfx", "kfp"),
}


class MissingExtraError(ImportError):
    """A part of the library was imported without the extra it needs."""


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that are not installed.

    Args:
      extra: "beam", "tfx" or "kubeflow".

    Returns:
      The top-level module names of `EXTRA_MODULES[extra]` that cannot be found, in order.

    Raises:
      KeyError: an extra this distribution does not have.
    """
    return [name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None]


def require(extra: str, part: str) -> None:
    """Raises `MissingExtraError` unless the modules of `extra` are installed.

    Args:
      extra: "beam", "tfx" or "kubeflow".
      part: what needs it, for the message (e.g. the package name).

    Raises:
      MissingExtraError: naming the missing modules and the `pip install` that brings them.

    Example:

        require("beam", "tfx_dynamic_inputs.materialize")  # at the top of the package
    """
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(
            f"{part} needs {', '.join(missing)}, which the core install does not bring: "
            f"pip install '{DISTRIBUTION}[{extra}]'"
        )
