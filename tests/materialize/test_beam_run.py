"""dynamic_pairs over a run written by the real Beam materialization job (DirectRunner)."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import tensorflow as tf
from PIL import Image

from tfx_dynamic_inputs import layout, materialize
from tfx_dynamic_inputs.inputs import ImageSpec, StoreOptions, dynamic_pairs, open_run


def _write_png(path: str, pixels: np.ndarray) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, format="PNG")
    with open(path, "wb") as f:
        f.write(buffer.getvalue())


def test_pairs_from_a_materialized_run(tmp_path):
    rng = np.random.default_rng(0)
    pixels = {}
    for domain, count in (("x", 13), ("y", 6)):
        for i in range(count):
            name = f"{domain}{i:02d}.png"
            pixels[(domain, name)] = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            _write_png(str(tmp_path / domain / name), pixels[(domain, name)])
    valid_names = {
        f"x{i:02d}.png": [f"y{j:02d}.png" for j in rng.choice(6, rng.integers(1, 4), False)]
        for i in range(13)
    }
    pairs_path = tmp_path / "pairs.jsonl"
    pairs_path.write_text(
        "".join(json.dumps({"x": x, "y": ys}) + "\n" for x, ys in valid_names.items())
    )
    output_dir = str(tmp_path / "run")
    materialize.run_pairs(
        materialize.PairsConfig(
            x_dir=str(tmp_path / "x"),
            y_dir=str(tmp_path / "y"),
            pairs=str(pairs_path),
            output_dir=output_dir,
        )
    )
    x_ids = layout.load_lines(os.path.join(layout.index_dir(output_dir, "x"), layout.IDS_FILE))
    y_ids = layout.load_lines(os.path.join(layout.index_dir(output_dir, "y"), layout.IDS_FILE))

    ds = dynamic_pairs(
        open_run(output_dir),
        batch_size=4,
        image=ImageSpec(8, 8, 3),
        strategy="least_sampled",
        store_options=StoreOptions(backend="disk"),
        check_examples=True,
    )
    assert ds.element_spec["x"] == tf.TensorSpec([4, 8, 8, 3], tf.uint8)
    seen = set()
    for _ in range(3):
        for batch in ds.as_numpy_iterator():
            for i, (x, y) in enumerate(zip(batch["x_index"], batch["y_index"], strict=True)):
                x_name, y_name = x_ids[x], y_ids[y]
                assert y_name in valid_names[x_name]
                np.testing.assert_array_equal(batch["x"][i], pixels[("x", x_name)])
                np.testing.assert_array_equal(batch["y"][i], pixels[("y", y_name)])
                seen.add((x_name, y_name))
    # Every valid list has at most 3 entries: three least-sampled epochs use every pair.
    assert seen == {(x, y) for x, ys in valid_names.items() for y in ys}
