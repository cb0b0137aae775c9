"""Small raster charts for TensorBoard images and PNG files: histograms and DET curves.

matplotlib is not a dependency, and the materialize job's pictures must not pull in TensorFlow
before they write, so the charts are plain uint8 RGB arrays [HEIGHT, WIDTH, 3]: bars, lines and
grids drawn with numpy, then the tick labels, axis titles and legend written with Pillow's
default font (`ImageFont.load_default()`; Pillow comes with the `[beam]` extra). Every text lies
at least `BORDER` pixels inside the canvas: a label that cannot is a ValueError, never cut off.
`write_png` writes a chart as a PNG file beside the TensorBoard events, for people without
TensorBoard.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from tfx_dynamic_inputs.layout.filesystem import create

HEIGHT, WIDTH = 300, 400
WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
GRID = (215, 215, 215)
BLUE = (31, 119, 180)
GREEN = (44, 160, 44)
RED = (214, 39, 40)
# DET axes: the usual error-rate ticks, and limits just outside the outer ones.
DET_TICKS = (0.001, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95, 0.99)
DET_LIMITS = (0.0005, 0.995)

_FONT = ImageFont.load_default()
# One line of text, from the top of the highest glyph to the bottom of the lowest: every label
# is placed by this box, so labels of one row share their baseline.
_INK_TOP, _INK_BOTTOM = _FONT.getbbox("0123456789%()Agjy")[1::2]
LINE = _INK_BOTTOM - _INK_TOP
BORDER = 3  # blank pixels along every edge of the canvas
_GAP = 4  # between an axis and its tick labels, between tick labels and the axis title
_SWATCH = 12  # width of a legend swatch
_RIGHT = 16  # right of the plot: room for half of the last x tick label
# Rows (LEGEND_STRIP, X_TITLE_STRIP) and columns (Y_TITLE_STRIP), [start, stop), that hold
# nothing but the legend and the axis titles.
LEGEND_STRIP = (BORDER, BORDER + LINE)
X_TITLE_STRIP = (HEIGHT - BORDER - LINE, HEIGHT - BORDER)
Y_TITLE_STRIP = (BORDER, BORDER + LINE)
_PLOT_TOP = LEGEND_STRIP[1] + 2 * _GAP
_PLOT_BOTTOM = X_TITLE_STRIP[0] - 2 * _GAP - LINE - 1  # the x axis row


class _Frame(NamedTuple):
    """The plot area: its bottom row (the x axis), left column (the y axis) and size."""

    bottom: int
    left: int
    height: int
    width: int


class _Label(NamedTuple):
    """A text at column `column` (its left, centre or right: `align`), and row `row` (its top,
    or its middle if `middle`); `vertical` writes it bottom to top, centred on (row, column)."""

    text: str
    row: int
    column: int
    align: str = "left"
    middle: bool = False
    vertical: bool = False


def integer_bins(values: np.ndarray, max_bins: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of integer `values` in bins of whole numbers.

    Bin i holds `edges[i] <= v < edges[i + 1]`; one value per bin unless the range needs more
    than `max_bins` bins, then the fewest whole numbers per bin that fit in `max_bins`.

    Args:
        values: int [N] (any shape, any integer dtype), N >= 1.
        max_bins: The most bins.

    Returns:
        `(edges, counts)`: int64 [n + 1] and int64 [n], n <= `max_bins`; the counts sum to N.

    Raises:
        ValueError: `values` is empty.

    Example:
        integer_bins(np.array([1, 2, 2, 5]))  # ([1, 2, 3, 4, 5, 6], [1, 2, 0, 0, 1])
    """
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
    x_title: str,
    y_title: str,
    names: Sequence[str] = (),
    marker: float | None = None,
    marker_name: str = "",
) -> np.ndarray:
    """Bars of one or more histograms over the same bins, overlaid half-transparent.

    Args:
        counts: Per series, the bar heights, float or int [n_bins] (all the same length: the
            bins, left to right).
        colors: Per series, its RGB color (0-255 each).
        x_labels: Written under the middle of the first and of the last bar.
        y_label: Written at the top of the y axis (the axis runs from 0 to `y_max`).
        y_max: The value at the top of the y axis.
        x_title: Written under the x axis: what the bins are.
        y_title: Written along the y axis: what the bars count.
        names: Per series, its name in the legend (a swatch of its bar color); required with
            more than one series; none (one series only) draws no legend of the bars.
        marker: Where to draw a vertical black line, as a fraction of the x axis (0 to 1,
            clipped); None draws none.
        marker_name: The marker's name in the legend ("" leaves it out).

    Returns:
        uint8 [HEIGHT, WIDTH, 3]: the RGB chart.

    Raises:
        ValueError: `names` are not one per series (none only for one series), or a text the
            chart cannot write whole (a character the font may lack, or too long to fit).

    Example:
        edges, counts = integer_bins(degrees)
        chart = histogram_chart(
            [counts], [BLUE], x_labels=("1", "5"), y_label="12", y_max=12,
            x_title="valid y per x record", y_title="x records",
        )
    """
    if len(names) != len(counts) and (names or len(counts) > 1):
        raise ValueError(f"{len(counts)} series need as many legend names, got {list(names)}")
    canvas = np.full((HEIGHT, WIDTH, 3), 255, np.uint8)
    frame = _frame([y_label, "0"])
    bottom, left, plot_height, plot_width = frame
    edges = np.linspace(0, plot_width, len(counts[0]) + 1).astype(int)
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
    _axes(canvas, frame)
    entries = [
        (name, "bar", color) for name, color in zip(names, colors[: len(names)], strict=True)
    ]
    if marker is not None and marker_name:
        entries.append((marker_name, "line", BLACK))
    tick_row = bottom + 1 + _GAP
    labels = [
        _Label(x_labels[0], tick_row, left + (edges[0] + edges[1]) // 2, "centre"),
        _Label(x_labels[1], tick_row, left + (edges[-2] + edges[-1]) // 2, "centre"),
        _Label(y_label, bottom - plot_height + 1, left - _GAP, "right", middle=True),
        _Label("0", bottom, left - _GAP, "right", middle=True),
        *_titles(frame, x_title, y_title),
        *_legend(canvas, entries, left),
    ]
    return _write(canvas, labels)


def det_chart(false_alarm: np.ndarray, miss: np.ndarray, eer: float) -> np.ndarray:
    """A detection error trade-off curve on normal-deviate axes, with grid and EER point.

    The axes are titled "false alarm rate (%)" and "miss rate (%)"; the legend names the curve,
    the EER point (with its value) and the equal-rates diagonal.

    Args:
        false_alarm: float [N], the false-alarm rate of each operating point (x axis).
        miss: float [N], the miss rate of each operating point (y axis), in the order of
            `false_alarm` (as `verification.det_curve` returns them).
        eer: The equal error rate, marked in red on the FAR = FRR diagonal (drawn grey).

    Returns:
        uint8 [HEIGHT, WIDTH, 3]. Axes run over `DET_LIMITS` with grid lines and labels (in %)
        at `DET_TICKS`; operating points outside the limits (rates of 0 or 1, say) are left
        out, as a normal-deviate axis cannot show them.

    Example:
        far, frr = verification.det_curve(scores, same_speaker)
        chart = det_chart(far, frr, verification.equal_error_rate(scores, same_speaker))
    """
    canvas = np.full((HEIGHT, WIDTH, 3), 255, np.uint8)
    tick_labels = [f"{tick * 100:g}" for tick in DET_TICKS]
    frame = _frame(tick_labels)
    bottom, left, plot_height, plot_width = frame
    to_column = _deviate_pixels(plot_width)
    to_height = _deviate_pixels(plot_height)
    labels = []
    for tick, label in zip(DET_TICKS, tick_labels, strict=True):
        column, row = left + to_column(tick), bottom - to_height(tick)
        canvas[bottom - plot_height + 1 : bottom + 1, column] = GRID
        canvas[row, left : left + plot_width] = GRID
        labels.append(_Label(label, bottom + 1 + _GAP, column, "centre"))
        labels.append(_Label(label, row, left - _GAP, "right", middle=True))
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
    _axes(canvas, frame)
    entries = [("DET curve", "line", BLUE), (f"EER {eer:.1%}", "square", RED)]
    entries.append(("equal rates", "line", GRID))
    labels += _titles(frame, "false alarm rate (%)", "miss rate (%)")
    labels += _legend(canvas, entries, left)
    return _write(canvas, labels)


def png_name(tag: str, step: int | None = None) -> str:
    """The file name of the PNG of the picture `tag` (at `step`, if it has several).

    Args:
        tag: The TensorBoard tag; its '/' become '_'.
        step: The summary step, for pictures written at several steps; None for one.

    Returns:
        `<tag>.png` or `<tag>_step<step>.png`.

    Example:
        png_name("eval/det_curve", 3)  # "eval_det_curve_step3.png"
    """
    stem = tag.replace("/", "_")
    return f"{stem}.png" if step is None else f"{stem}_step{step}.png"


def write_png(image: np.ndarray, path: str) -> None:
    """Writes a chart as a PNG file, through the layout's file system (local, gs://, ...).

    Args:
        image: uint8 [H, W, 3], an RGB chart (as the chart functions return).
        path: The file to write; a local parent folder is made.

    Example:
        write_png(det_chart(far, frr, eer), os.path.join(log_dir, png_name("eval/det_curve")))
    """
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image, np.uint8)).save(buffer, format="PNG")
    with create(path) as f:
        f.write(buffer.getvalue())


def _frame(y_labels: Sequence[str]) -> _Frame:
    """The plot area of a chart whose y axis carries `y_labels`: the widest sets its left."""
    left = Y_TITLE_STRIP[1] + 2 * _GAP + max(_width(label) for label in y_labels)
    return _Frame(_PLOT_BOTTOM, left, _PLOT_BOTTOM - _PLOT_TOP + 1, WIDTH - _RIGHT - left)


def _axes(canvas: np.ndarray, frame: _Frame) -> None:
    bottom, left, plot_height, plot_width = frame
    canvas[bottom - plot_height + 1 : bottom + 1, left] = BLACK
    canvas[bottom, left : left + plot_width] = BLACK


def _titles(frame: _Frame, x_title: str, y_title: str) -> list[_Label]:
    """The axis titles, each centred on its axis in its strip."""
    bottom, left, plot_height, plot_width = frame
    return [
        _Label(x_title, X_TITLE_STRIP[0], left + plot_width // 2, "centre"),
        _Label(y_title, bottom - plot_height // 2, Y_TITLE_STRIP[0], vertical=True),
    ]


def _legend(
    canvas: np.ndarray, entries: Sequence[tuple[str, str, tuple[int, int, int]]], left: int
) -> list[_Label]:
    """Draws the swatches of `entries` (name, "bar" / "line" / "square", color) in a row of
    the legend strip from column `left`; returns their names' labels."""
    top, stop = LEGEND_STRIP
    middle = top + LINE // 2
    labels = []
    column = left
    for name, kind, color in entries:
        if column + _SWATCH + _GAP + _width(name) > WIDTH - BORDER:
            raise ValueError(
                f"the legend {[entry[0] for entry in entries]} is wider than the chart"
            )
        if kind == "bar":  # blended over white as the bars are, so it shows their color
            _blend(canvas, slice(top + 1, stop - 1), slice(column, column + _SWATCH), color)
        elif kind == "line":
            canvas[middle - 1 : middle + 1, column : column + _SWATCH] = color
        else:
            centre = column + _SWATCH // 2
            canvas[middle - 2 : middle + 3, centre - 2 : centre + 3] = color
        labels.append(_Label(name, top, column + _SWATCH + _GAP))
        column += _SWATCH + _GAP + _width(name) + 3 * _GAP
    return labels


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


def _width(text: str) -> int:
    """Columns of ink `text` takes in the chart font."""
    x0, _, x1, _ = _FONT.getbbox(text)
    return x1 - x0


def _write(canvas: np.ndarray, labels: Sequence[_Label]) -> np.ndarray:
    """`canvas` with `labels` written in black, each moved inside the border if it stuck out.

    Raises:
        ValueError: a label holds a character the font may lack (only printable ASCII is sure
            to be there), or is longer than the canvas.
    """
    image = Image.fromarray(canvas)
    draw = ImageDraw.Draw(image)
    for label in labels:
        if not (label.text.isascii() and label.text.isprintable()):
            raise ValueError(f"the chart font has no glyph for some of {label.text!r}")
        x0 = _FONT.getbbox(label.text)[0]
        width = _width(label.text)
        if label.vertical:
            # Written on its own, turned a quarter anticlockwise, and pasted through as a mask.
            mask = Image.new("L", (width, LINE))
            ImageDraw.Draw(mask).text((-x0, -_INK_TOP), label.text, font=_FONT, fill=255)
            left, top = _inside(label.column, label.row - width // 2, LINE, width, label.text)
            image.paste(
                BLACK,
                (left, top, left + LINE, top + width),
                mask.transpose(Image.Transpose.ROTATE_90),
            )
            continue
        shift = {"left": 0, "centre": width // 2, "right": width - 1}[label.align]
        top = label.row - LINE // 2 if label.middle else label.row
        left, top = _inside(label.column - shift, top, width, LINE, label.text)
        draw.text((left - x0, top - _INK_TOP), label.text, font=_FONT, fill=BLACK)
    return np.array(image)


def _inside(left: int, top: int, width: int, height: int, text: str) -> tuple[int, int]:
    """(left, top) of a `width` x `height` box, moved as little as puts it inside the border."""
    if width > WIDTH - 2 * BORDER or height > HEIGHT - 2 * BORDER:
        raise ValueError(f"{text!r} is longer than the chart ({width} x {height} pixels)")
    return (
        min(max(left, BORDER), WIDTH - BORDER - width),
        min(max(top, BORDER), HEIGHT - BORDER - height),
    )
