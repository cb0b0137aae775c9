"""Small raster charts drawn with numpy, for TensorBoard images: histograms and DET curves.

matplotlib is not a dependency, and the materialize job's pictures must not pull in TensorFlow
before they write, so the charts are plain uint8 RGB arrays [HEIGHT, WIDTH, 3]. Axis values are
written with a 3x5-pixel font that knows only digits, '.', '-' and '%'; axis titles go in the
summary's description instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

HEIGHT, WIDTH = 240, 320
WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
GRID = (215, 215, 215)
BLUE = (31, 119, 180)
GREEN = (44, 160, 44)
RED = (214, 39, 40)
# DET axes: the usual error-rate ticks, and limits just outside the outer ones.
DET_TICKS = (0.001, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95, 0.99)
DET_LIMITS = (0.0005, 0.995)

_TOP, _BOTTOM, _LEFT, _RIGHT = 10, 18, 40, 14
_SCALE = 2  # font pixels per glyph pixel
# Each glyph: 5 rows of 3 pixels, rows separated by spaces.
_GLYPH_ROWS = {
    "0": "111 101 101 101 111",
    "1": "010 110 010 010 111",
    "2": "111 001 111 100 111",
    "3": "111 001 111 001 111",
    "4": "101 101 111 001 001",
    "5": "111 100 111 001 111",
    "6": "111 100 111 101 111",
    "7": "111 001 001 001 001",
    "8": "111 101 111 101 111",
    "9": "111 101 111 001 111",
    ".": "000 000 000 000 010",
    "-": "000 000 111 000 000",
    "%": "101 001 010 100 101",
}
_GLYPHS = {
    char: np.kron(
        np.array([[c == "1" for c in row] for row in rows.split()]), np.ones((_SCALE, _SCALE))
    )
    > 0
    for char, rows in _GLYPH_ROWS.items()
}
_GLYPH_HEIGHT, _GLYPH_WIDTH = 5 * _SCALE, 3 * _SCALE
_ADVANCE = _GLYPH_WIDTH + _SCALE


def integer_bins(values: np.ndarray, max_bins: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of integer `values` in bins of whole numbers: (edges int64 [n + 1], counts
    int64 [n]). Bin i holds `edges[i] <= v < edges[i + 1]`; one value per bin unless the range
    needs more than `max_bins` bins. The counts sum to `len(values)`."""
    values = np.asarray(values, np.int64)
    if values.size == 0:
        raise ValueError("no values to bin")
    low, high = int(values.min()), int(values.max())
    width = -(-(high - low + 1) // max_bins)  # ceil: the fewest whole numbers per bin
    counts = np.bincount((values - low) // width)
    return low + width * np.arange(len(counts) + 1, dtype=np.int64), counts.astype(np.int64)


def histogram_chart(
    counts: Sequence[np.ndarray],
    colors: Sequence[tuple[int, int, int]],
    *,
    x_labels: tuple[str, str],
    y_label: str,
    y_max: float,
    marker: float | None = None,
) -> np.ndarray:
    """Bars of one or more histograms over the same bins, overlaid half-transparent.

    Args:
      counts: per series, the bar heights (all the same length: the bins, left to right).
      colors: per series, its RGB color.
      x_labels: written under the middle of the first and of the last bar.
      y_label: written at the top of the y axis (the axis runs from 0 to `y_max`).
      y_max: the value at the top of the y axis.
      marker: where to draw a vertical black line, as a fraction of the x axis (0 to 1).

    Returns:
      uint8 [HEIGHT, WIDTH, 3].
    """
    canvas, (bottom, left, plot_height, plot_width) = _blank()
    num_bins = len(counts[0])
    edges = np.linspace(0, plot_width, num_bins + 1).astype(int)
    for series, color in zip(counts, colors, strict=True):
        heights = np.round(np.asarray(series, np.float64) / max(y_max, 1e-12) * plot_height)
        for start, stop, height in zip(edges[:-1], edges[1:], heights.astype(int), strict=True):
            # A one-pixel gap between bars wide enough to keep one.
            stop = stop - 1 if stop - start > 2 else stop
            _blend(
                canvas,
                slice(bottom - height + 1, bottom + 1),
                slice(left + start, left + stop),
                color,
            )
    if marker is not None:
        column = left + int(round(min(max(marker, 0.0), 1.0) * (plot_width - 1)))
        canvas[bottom - plot_height + 1 : bottom + 1, column] = BLACK
    _axes(canvas, bottom, left, plot_height, plot_width)
    _text(canvas, x_labels[0], bottom + 4, left + (edges[0] + edges[1]) // 2, "centre")
    _text(canvas, x_labels[1], bottom + 4, left + (edges[-2] + edges[-1]) // 2, "centre")
    _text(canvas, y_label, bottom - plot_height + 1, left - 4, "right")
    _text(canvas, "0", bottom - _GLYPH_HEIGHT + 1, left - 4, "right")
    return canvas


def det_chart(false_alarm: np.ndarray, miss: np.ndarray, eer: float) -> np.ndarray:
    """A detection error trade-off curve on normal-deviate axes, with grid and EER point.

    Args:
      false_alarm: float [N], the false-alarm rate of each operating point (x axis).
      miss: float [N], the miss rate of each operating point (y axis), in the order of
        `false_alarm` (as `verification.det_curve` returns them).
      eer: the equal error rate, marked on the FAR = FRR diagonal (drawn grey).

    Returns:
      uint8 [HEIGHT, WIDTH, 3]. Axes run over `DET_LIMITS` with grid lines and labels (in %)
      at `DET_TICKS`; operating points outside the limits (rates of 0 or 1, say) are left out,
      as a normal-deviate axis cannot show them.
    """
    canvas, (bottom, left, plot_height, plot_width) = _blank()
    to_column = _deviate_pixels(plot_width)
    to_height = _deviate_pixels(plot_height)
    for tick in DET_TICKS:
        column, height = left + to_column(tick), to_height(tick)
        canvas[bottom - plot_height + 1 : bottom + 1, column] = GRID
        canvas[bottom - height, left : left + plot_width] = GRID
        label = f"{tick * 100:g}"
        _text(canvas, label, bottom + 4, column, "centre")
        _text(canvas, label, bottom - height - _GLYPH_HEIGHT // 2, left - 4, "right")
    # FAR = FRR: both axes span the same deviates, so it joins the plot's corners.
    _polyline(
        canvas,
        np.array([bottom, bottom - plot_height + 1]),
        np.array([left, left + plot_width - 1]),
        GRID,
    )
    false_alarm, miss = np.asarray(false_alarm, np.float64), np.asarray(miss, np.float64)
    low, high = DET_LIMITS
    shown = (false_alarm >= low) & (false_alarm <= high) & (miss >= low) & (miss <= high)
    columns = left + to_column(false_alarm[shown])
    rows = bottom - to_height(miss[shown])
    # A monotone curve crosses at most plot_width + plot_height pixels: keep one point per
    # pixel, however many trials there were.
    moved = np.concatenate([[True], (np.diff(columns) != 0) | (np.diff(rows) != 0)])
    _polyline(canvas, rows[moved], columns[moved], BLUE)
    if low <= eer <= high:
        row, column = bottom - to_height(eer), left + to_column(eer)
        canvas[row - 2 : row + 3, column - 2 : column + 3] = RED
    _axes(canvas, bottom, left, plot_height, plot_width)
    return canvas


def _blank() -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """A white canvas and its plot area: (bottom row, left column, height, width)."""
    canvas = np.full((HEIGHT, WIDTH, 3), 255, np.uint8)
    plot_height, plot_width = HEIGHT - _TOP - _BOTTOM, WIDTH - _LEFT - _RIGHT
    return canvas, (_TOP + plot_height - 1, _LEFT, plot_height, plot_width)


def _axes(canvas: np.ndarray, bottom: int, left: int, plot_height: int, plot_width: int) -> None:
    canvas[bottom - plot_height + 1 : bottom + 1, left] = BLACK
    canvas[bottom, left : left + plot_width] = BLACK


def _blend(canvas: np.ndarray, rows: slice, columns: slice, color: tuple[int, int, int]) -> None:
    # Half-transparent, so overlaid histograms stay visible where they overlap.
    region = canvas[rows, columns].astype(np.float64)
    canvas[rows, columns] = np.round(0.45 * region + 0.55 * np.asarray(color)).astype(np.uint8)


def _deviate_pixels(length: int) -> Callable[[np.ndarray | float], np.ndarray]:
    """Maps probabilities in `DET_LIMITS` to pixel offsets 0..length-1 on a normal-deviate axis.

    Works through the probabilities at the pixel boundaries (one `inv_cdf`/`cdf` per pixel, not
    per point), so millions of operating points cost one `searchsorted`.
    """
    normal = NormalDist()
    low, high = (normal.inv_cdf(p) for p in DET_LIMITS)
    boundaries = np.array(
        [normal.cdf(low + (high - low) * (i + 0.5) / (length - 1)) for i in range(length - 1)]
    )

    def to_pixels(probability: np.ndarray | float) -> np.ndarray:
        return np.searchsorted(boundaries, probability)

    return to_pixels


def _polyline(
    canvas: np.ndarray, rows: np.ndarray, columns: np.ndarray, color: tuple[int, int, int]
) -> None:
    """Straight segments between consecutive points, two pixels thick."""
    for r0, c0, r1, c1 in zip(rows[:-1], columns[:-1], rows[1:], columns[1:], strict=True):
        steps = max(abs(int(r1) - int(r0)), abs(int(c1) - int(c0))) + 1
        line_rows = np.round(np.linspace(r0, r1, steps)).astype(int)
        line_columns = np.round(np.linspace(c0, c1, steps)).astype(int)
        canvas[line_rows, line_columns] = color
        canvas[np.minimum(line_rows + 1, HEIGHT - 1), line_columns] = color
    if len(rows) == 1:
        canvas[rows, columns] = color


def _text(canvas: np.ndarray, text: str, top: int, anchor: int, align: str) -> None:
    """Writes `text` with its top at row `top`, its left/centre/right at column `anchor`."""
    unknown = sorted(set(text) - set(_GLYPHS))
    if unknown:
        raise ValueError(f"the chart font has no glyph for {unknown} (in {text!r})")
    width = len(text) * _ADVANCE - _SCALE
    left = {"left": anchor, "centre": anchor - width // 2, "right": anchor - width + 1}[align]
    left, top = min(max(left, 0), WIDTH - width), max(top, 0)
    for position, char in enumerate(text):
        column = left + position * _ADVANCE
        region = canvas[top : top + _GLYPH_HEIGHT, column : column + _GLYPH_WIDTH]
        region[_GLYPHS[char]] = BLACK
