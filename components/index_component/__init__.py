"""`IndexExamples`: any TFX `Examples` artifact -> the indexed record sets the trainers read.

    from components.index_component import IndexExamples

The component resolves on first use: the Beam job's modules import without TFX.
"""

from components.extras import require

# Without the extra: one line naming the pip install, not an error deep in an import.
require("tfx", "components.index_component")
from components.materialize.lazy_exports import resolver

_EXPORTS = {"IndexExamples": "component", "IndexExamplesSpec": "component"}

__all__ = sorted(_EXPORTS)
__getattr__ = resolver(__name__, _EXPORTS)
