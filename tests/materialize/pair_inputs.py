"""The input folders of a pairs job, generated: x and y image folders and a JSONL pair list.

Kept out of `generate.py` (the single files) because it lays out a whole job's inputs.
"""

from __future__ import annotations

import pathlib

import numpy as np

from tests.materialize import generate


def write_pairs_inputs(
    root: pathlib.Path,
    x_names: list[str],
    y_names: list[str],
    pairs: dict[str, list[str]],
    rng: np.random.Generator,
) -> dict[str, str]:
    """Writes random images `root/x/<x_names>`, `root/y/<y_names>` and `root/pairs.jsonl`.

    Args:
        root: The folder to write into.
        x_names: File names of the x images (PNG, or JPEG by their extension).
        y_names: File names of the y images.
        pairs: The y names listed for each x name.
        rng: Draws the images' sizes and pixels.

    Returns:
        The paths by role: {"x": x folder, "y": y folder, "pairs": pair list}.

    Example:
        inputs = write_pairs_inputs(tmp_path, ["a.png"], ["b.png"], {"a.png": ["b.png"]}, rng)
    """
    inputs = {"x": str(root / "x"), "y": str(root / "y"), "pairs": str(root / "pairs.jsonl")}
    generate.write_images(inputs["x"], x_names, rng)
    generate.write_images(inputs["y"], y_names, rng)
    generate.write_pairs_jsonl(inputs["pairs"], pairs)
    return inputs
