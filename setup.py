"""The wheel's one import name, `tfx_dynamic_inputs`, over the repository's three folders.

The folders keep their names (`components/`, `pipeline/`, `kubeflow/`), but installed they are
`tfx_dynamic_inputs`, `tfx_dynamic_inputs.pipeline` and `tfx_dynamic_inputs.kubeflow`: a
top-level `kubeflow` package would hide the namespace that kubeflow-training and kubeflow-katib
install into, and `components` and `pipeline` are names user projects (TFX's own templates)
already use. Everything else is in pyproject.toml; only the package list, which follows the
folders, is computed here.
"""

from setuptools import find_packages, setup

PACKAGE = "tfx_dynamic_inputs"
# Import name -> repository folder.
PACKAGE_DIRS = {
    PACKAGE: "components",
    f"{PACKAGE}.pipeline": "pipeline",
    f"{PACKAGE}.kubeflow": "kubeflow",
}

setup(
    package_dir=PACKAGE_DIRS,
    packages=[
        f"{name}.{sub}" if sub else name
        for name, folder in PACKAGE_DIRS.items()
        for sub in ["", *find_packages(folder)]
    ],
)
