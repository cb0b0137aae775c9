"""Custom artifact types compile for KFP v2 and are recovered from their schema title."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.orchestration.kubeflow.v2 import compiler_utils
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils

from tfx_dynamic_inputs import artifacts


@pytest.mark.parametrize("artifact_type", artifacts.ARTIFACT_TYPES)
def test_schema_title_is_the_importable_type_name(artifact_type):
    schema = compiler_utils.get_artifact_schema(artifact_type)
    assert yaml.safe_load(schema)["title"] == artifact_type.TYPE_NAME
    assert not artifact_type.PROPERTIES
    runtime = pipeline_spec_pb2.RuntimeArtifact(
        uri="/tmp/x", type=pipeline_spec_pb2.ArtifactTypeSchema(instance_schema=schema)
    )
    runtime.metadata.update({"num_rejects": 3.0})
    parsed = kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(
        {"index": pipeline_spec_pb2.ArtifactList(artifacts=[runtime])}
    )["index"][0]
    assert type(parsed) is artifact_type
    assert parsed.uri == "/tmp/x"
    assert parsed.get_int_custom_property("num_rejects") == 3


def test_importing_the_package_does_not_import_tfx():
    # The lazy resolution itself is exercised above: the entrypoint imports
    # `tfx_dynamic_inputs.<Class>` by its schema title.
    code = (
        "import sys, tfx_dynamic_inputs; "
        "assert 'tfx' not in sys.modules and 'tensorflow' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_attribute_of_the_package_is_an_attribute_error():
    import tfx_dynamic_inputs

    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = tfx_dynamic_inputs.NoSuchThing
