"""Per-epoch re-sampled training inputs, their Beam materialization and TFX components."""

_ARTIFACT_TYPE_NAMES = frozenset({"OffsetIndex", "PairIndex", "ClassIndex"})


def __getattr__(name: str):
    # Kubeflow v2 imports a custom artifact class by its schema title `tfx_dynamic_inputs.<Class>`;
    # resolve it lazily so `import tfx_dynamic_inputs.inputs` does not pay for importing TFX.
    if name in _ARTIFACT_TYPE_NAMES:
        from tfx_dynamic_inputs import artifacts

        return getattr(artifacts, name)
    raise AttributeError(f"module 'tfx_dynamic_inputs' has no attribute {name!r}")
