"""Per-epoch re-sampled training inputs, their Beam materialization and TFX components."""

_ARTIFACT_TYPE_NAMES = frozenset({"OffsetIndex", "PairIndex", "ClassIndex"})


def __getattr__(name: str):
    # Kubeflow v2 imports a custom artifact class by its schema title `components.<Class>`;
    # resolve it lazily so `import components.inputs` does not pay for importing TFX.
    if name in _ARTIFACT_TYPE_NAMES:
        from components import artifacts

        return getattr(artifacts, name)
    raise AttributeError(f"module 'components' has no attribute {name!r}")
