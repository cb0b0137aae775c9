"""Compiling the pipelines for Kubeflow Pipelines; needs the `[kubeflow]` extra."""

from tfx_dynamic_inputs.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("kubeflow", "tfx_dynamic_inputs.kubeflow")
