"""`IndexExamples`: any TFX `Examples` artifact -> the indexed record sets the trainers read.

    from tfx_dynamic_inputs.index_component import IndexExamples

The component resolves on first use: the Beam job's modules import without TFX.
"""

from tfx_dynamic_inputs.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("tfx", "tfx_dynamic_inputs.index_component")
from tfx_dynamic_inputs.materialize.lazy_exports import resolver

_EXPORTS = {"IndexExamples": "component", "IndexExamplesSpec": "component"}

__all__ = sorted(_EXPORTS)
__getattr__ = resolver(__name__, _EXPORTS)
