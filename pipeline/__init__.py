"""The pipelines: local runs (LocalDagRunner) and their configs; needs the `[tfx]` extra."""

from tfx_dynamic_inputs.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("tfx", "tfx_dynamic_inputs.pipeline")
