from __future__ import annotations

import pytest

from tests.models import synthetic
from tfx_dynamic_inputs.pipeline.sample_data import write_digit_domains


@pytest.fixture(scope="session")
def digits(tmp_path_factory):
    """The bundled digit domains as arrays: x, y (float32 [1797, 32, 32, 1]) and valid pairs."""
    domains = write_digit_domains(str(tmp_path_factory.mktemp("digits") / "domains"))
    return synthetic.digit_pairs(domains)
