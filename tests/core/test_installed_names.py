"""What the wheel installs: one import name, `tfx_dynamic_inputs`, holding every package folder of
the checkout (setup.py), and nothing else: no `tests`, no top-level `components`, `pipeline` or
`kubeflow` to shadow another distribution's package or namespace."""

from __future__ import annotations

import json
import os
import sysconfig
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# From the environment's site-packages: the checkout (on sys.path under pytest) holds the
# egg-info of an editable build.
[DISTRIBUTION] = metadata.distributions(
    name="tfx-dynamic-inputs", path=[sysconfig.get_paths()["purelib"]]
)
# Import name -> the checkout's folder (what setup.py maps).
PACKAGE_FOLDERS = {
    "tfx_dynamic_inputs": "components",
    "tfx_dynamic_inputs.pipeline": "pipeline",
    "tfx_dynamic_inputs.kubeflow": "kubeflow",
}


def _is_editable() -> bool:
    direct_url = DISTRIBUTION.read_text("direct_url.json")
    return bool(direct_url) and json.loads(direct_url).get("dir_info", {}).get("editable", False)


pytestmark = pytest.mark.skipif(
    _is_editable(), reason="an editable install (make setup); make test-core installs the wheel"
)


def _installed_files() -> list[str]:
    return [str(path) for path in DISTRIBUTION.files or []]


def test_the_wheel_installs_one_top_level_name():
    # Outside site-packages (paths from `..`) only the console script is installed.
    outside = [path for path in _installed_files() if path.startswith("..")]
    assert [os.path.basename(path) for path in outside] == ["tfx-dynamic-inputs"], outside
    top_level = {path.split("/")[0] for path in _installed_files() if not path.startswith("..")}
    top_level = {name for name in top_level if not name.endswith(".dist-info")}
    assert top_level == {"tfx_dynamic_inputs"}
    assert DISTRIBUTION.read_text("top_level.txt").split() == ["tfx_dynamic_inputs"]


def test_every_package_folder_of_the_checkout_is_installed_under_its_import_name():
    installed = set(_installed_files())
    for name, folder in PACKAGE_FOLDERS.items():
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            if "__init__.py" not in files:
                continue
            package = os.path.relpath(directory, os.path.join(ROOT, folder))
            target = name.replace(".", "/") + ("" if package == "." else f"/{package}")
            assert f"{target}/__init__.py" in installed, f"{directory} is not in the wheel"
