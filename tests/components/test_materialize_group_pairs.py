"""`MaterializePairs` pairing by group (`groups_from_subfolder`): its executor on real images,
the group index in the `PairIndex` artifact, read back by `open_pairs_run`."""

from __future__ import annotations

import numpy as np

from tests.components.conftest import materialize
from tests.materialize import generate, readback
from tfx_dynamic_inputs import artifacts, layout
from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.inputs import GroupPairs, open_pairs_run
from tfx_dynamic_inputs.materialize_component import MaterializePairs


def test_the_component_takes_groups_instead_of_a_pair_list():
    component = MaterializePairs(x_dir="x", y_dir="y", x_groups="xg.csv", y_groups="yg.csv")
    assert component.exec_properties[keys.X_GROUPS_KEY] == "xg.csv"
    assert component.exec_properties[keys.PAIRS_KEY] is None
    by_folder = MaterializePairs(x_dir="x", y_dir="y", groups_from_subfolder=True)
    assert by_folder.exec_properties[keys.GROUPS_FROM_SUBFOLDER_KEY] is True


def test_pairs_by_subfolder_land_in_the_pair_index_artifact(tmp_path):
    rng = np.random.default_rng(0)
    generate.write_images(str(tmp_path / "x"), ["cat/1.png", "cat/2.png", "dog/3.png"], rng)
    generate.write_images(str(tmp_path / "y"), ["cat/a.png", "dog/b.png", "dog/c.png"], rng)
    run = materialize(
        MaterializePairs,
        str(tmp_path / "run"),
        {
            keys.X_DIR_KEY: str(tmp_path / "x"),
            keys.Y_DIR_KEY: str(tmp_path / "y"),
            keys.GROUPS_FROM_SUBFOLDER_KEY: True,
        },
    )
    offset_index, pair_index = run[keys.OFFSET_INDEX_KEY], run[keys.PAIR_INDEX_KEY]
    assert layout.has_group_index(pair_index.uri)
    assert not layout.has_group_index(offset_index.uri)  # moved into the artifact
    _, _, pairs = open_pairs_run(offset_index.uri, pair_index_dir=pair_index.uri)
    assert isinstance(pairs, GroupPairs)
    x_ids, y_ids = readback.ids(offset_index.uri, "x"), readback.ids(offset_index.uri, "y")
    assert [pairs.y_of(x).tolist() for x in range(pairs.num_x)] == [
        [j for j, y in enumerate(y_ids) if y.split("/")[0] == x_id.split("/")[0]] for x_id in x_ids
    ]
    assert pair_index.get_int_custom_property(artifacts.NUM_PAIRS_PROPERTY) == 2 * 1 + 1 * 2
