"""Checks that a chart can be read: axis titles, legend, nothing cut off; and its PNG file."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image

from tfx_dynamic_inputs.models import charts


def color_pixels(image: np.ndarray, color: tuple[int, int, int]) -> np.ndarray:
    """bool [H, W]: where `image` is exactly `color`."""
    return np.all(image == np.asarray(color, np.uint8), axis=-1)


def bar_color(color: tuple[int, int, int]) -> tuple[int, int, int]:
    """The color a histogram bar of `color` has over white (bars are half-transparent)."""
    return tuple(int(c) for c in np.round(0.45 * 255 + 0.55 * np.asarray(color)))


def assert_readable(image: np.ndarray, legend_colors: Sequence[tuple[int, int, int]]) -> None:
    """Asserts that `image` has both axis titles and a legend of `legend_colors` (none: no
    legend), and that no text is cut off by the canvas or drawn over by the plot."""
    assert image.shape == (charts.HEIGHT, charts.WIDTH, 3) and image.dtype == np.uint8
    ink = np.any(image != 255, axis=-1)
    # Nothing within the border: no text reaches the canvas edge, so none is cut off there.
    border = charts.BORDER
    assert not ink[:border].any() and not ink[-border:].any()
    assert not ink[:, :border].any() and not ink[:, -border:].any()
    x_title = image[slice(*charts.X_TITLE_STRIP)]
    y_title = image[:, slice(*charts.Y_TITLE_STRIP)]
    for strip in (x_title, y_title):
        # Text (black anti-aliased to grey) and nothing of the plot in the titles' strips.
        assert np.any(strip != 255, axis=-1).sum() > 20
        assert np.all((strip == strip[..., :1]).all(axis=-1))
    # A blank line parts each title from the tick labels, so neither overlaps the other.
    assert not ink[charts.X_TITLE_STRIP[0] - 1].any()
    assert not ink[:, charts.Y_TITLE_STRIP[1]].any()
    # The y title runs along the plot, between the legend and the x title.
    title_rows = np.flatnonzero(np.any(y_title != 255, axis=(1, 2)))
    assert charts.LEGEND_STRIP[1] < title_rows.min() < title_rows.max() < charts.X_TITLE_STRIP[0]

    legend = image[slice(*charts.LEGEND_STRIP)]
    assert not ink[charts.LEGEND_STRIP[1]].any()  # nothing of the plot touches the legend
    if not legend_colors:
        assert not np.any(legend != 255)
    for color in legend_colors:
        assert color_pixels(legend, color).sum() >= 10, color  # its swatch
    if legend_colors:
        # The names: grey text right of the swatches.
        grey = np.all(legend == legend[..., :1], axis=-1) & np.any(legend < 128, axis=-1)
        assert grey.sum() > 20 * len(legend_colors)


def read_png(path: str) -> np.ndarray:
    """The pixels of the PNG file at `path`, opened with Pillow: uint8 [H, W, 3] (RGB)."""
    with Image.open(path) as image:
        assert (image.format, image.mode) == ("PNG", "RGB")
        return np.array(image)
