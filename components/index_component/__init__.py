"""`IndexExamples`: any TFX `Examples` artifact -> the indexed record sets `ResampledTrainer` reads.

    from components.index_component import IndexExamples

The component resolves on first use: the Beam job's modules import without TFX.
"""

import importlib

_EXPORTS = {"IndexExamples": "component", "IndexExamplesSpec": "component"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
