"""The TensorBoard pictures: numpy charts, the verification summaries, the CycleGAN translations."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tests.models.chart_checks import assert_readable, bar_color, color_pixels, read_png
from tests.models.events import read_summaries
from tfx_dynamic_inputs.models import charts, cyclegan, translation_snapshots, verification

CHART_SHAPE = (charts.HEIGHT, charts.WIDTH, 3)
TITLES = {"x_title": "valid y per x record", "y_title": "x records"}


@pytest.mark.parametrize("high", [8, 1000])
def test_integer_bins_count_every_value_once(high):
    values = np.random.default_rng(0).integers(3, high, 500)
    edges, counts = charts.integer_bins(values, max_bins=64)
    assert counts.sum() == len(values) and len(edges) == len(counts) + 1 <= 65
    assert edges[0] == values.min() and edges[-2] <= values.max() < edges[-1]
    widths = np.diff(edges)
    assert np.all(widths == widths[0]) and (widths[0] == 1) == (high - 3 <= 64)
    for low, up, count in zip(edges[:-1], edges[1:], counts, strict=True):
        assert count == np.count_nonzero((values >= low) & (values < up))
    with pytest.raises(ValueError, match="no values"):
        charts.integer_bins(np.array([], np.int64))


def test_histogram_chart_bars_are_proportional_to_the_counts():
    image = charts.histogram_chart(
        [np.array([1, 2, 4])], [charts.BLUE], x_labels=("1", "3"), y_label="4", y_max=4, **TITLES
    )
    assert image.shape == CHART_SHAPE and image.dtype == np.uint8
    assert_readable(image, legend_colors=())  # one series: no legend
    # The half-transparent bars over white: the same color in every bar.
    bar = np.any(image != 255, axis=-1) & (image[..., 2] > image[..., 0])
    heights = bar.sum(axis=0)
    columns = np.flatnonzero(heights)
    tallest = heights.max()
    # The x axis is drawn over each bar's bottom row: a bar of height h shows h - 1 pixels.
    quarter, half = (round((tallest + 1) * share) - 1 for share in (1 / 4, 1 / 2))
    assert sorted(set(heights[columns].tolist())) == [quarter, half, tallest]
    with pytest.raises(ValueError, match="no glyph"):
        charts.histogram_chart(
            [np.ones(3)], [charts.RED], x_labels=("10\u2076", "2"), y_label="1", y_max=1, **TITLES
        )


def test_histogram_chart_with_two_series_has_a_legend_of_their_colors():
    image = charts.histogram_chart(
        [np.array([1, 3, 2, 0]), np.array([0, 1, 3, 2])],
        [charts.GREEN, charts.RED],
        x_labels=("-0.50", "0.75"),
        y_label="30%",
        y_max=3,
        x_title="cosine score",
        y_title="fraction of trials",
        names=("target", "non-target"),
        marker=0.5,
        marker_name="EER threshold",
    )
    assert_readable(image, [bar_color(charts.GREEN), bar_color(charts.RED), charts.BLACK])


def test_charts_refuse_texts_they_cannot_write_whole():
    series = ([np.ones(3)], [charts.BLUE])
    labels = {"x_labels": ("1", "3"), "y_label": "1", "y_max": 1}
    with pytest.raises(ValueError, match="longer than the chart"):
        charts.histogram_chart(*series, **labels, x_title="x" * 200, y_title="count")
    with pytest.raises(ValueError, match="longer than the chart"):
        charts.histogram_chart(*series, **labels, x_title="degree", y_title="y" * 200)
    with pytest.raises(ValueError, match="legend .* is wider than the chart"):
        charts.histogram_chart(*series, **labels, **TITLES, names=["one series " * 20])
    with pytest.raises(ValueError, match="2 series need as many legend names"):
        charts.histogram_chart([np.ones(3)] * 2, [charts.BLUE] * 2, **labels, **TITLES)


def test_charts_are_written_as_png_files(tmp_path):
    image = charts.histogram_chart(
        [np.array([1, 2, 4])], [charts.BLUE], x_labels=("1", "3"), y_label="4", y_max=4, **TITLES
    )
    assert charts.png_name("eval/det_curve", 3) == "eval_det_curve_step3.png"
    assert charts.png_name("pairs/degree") == "pairs_degree.png"
    path = str(tmp_path / "new folder" / charts.png_name("pairs/degree"))
    charts.write_png(image, path)
    np.testing.assert_array_equal(read_png(path), image)


def test_det_chart_draws_a_monotone_curve_and_the_eer():
    rng = np.random.default_rng(1)
    same = rng.random(200_000) < 0.1
    scores = rng.normal(size=same.size) + 2.0 * same
    far, frr = verification.det_curve(scores, same)
    eer = verification.equal_error_rate(scores, same)
    image = charts.det_chart(far, frr, eer)
    assert image.shape == CHART_SHAPE and image.dtype == np.uint8
    assert_readable(image, legend_colors=[charts.BLUE, charts.RED, charts.GRID])
    plot = image[charts.LEGEND_STRIP[1] :]  # below the legend, whose swatches share the colors
    rows, columns = np.nonzero(color_pixels(plot, charts.BLUE))
    assert len(columns) > 100
    # Lower miss rates to the right: the curve's lowest row per column never goes up.
    lowest = [rows[columns == column].max() for column in np.unique(columns)]
    assert np.all(np.diff(lowest) >= 0)
    assert color_pixels(plot, charts.RED).sum() == 25  # the EER square, 5 x 5
    # Its legend swatch, the same square.
    assert color_pixels(image[slice(*charts.LEGEND_STRIP)], charts.RED).sum() == 25


def test_verification_summaries_are_written(tmp_path):
    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(8), 5)
    upper = np.triu(np.ones((40, 40), bool), k=1)
    same = (labels[:, None] == labels[None])[upper]
    scores = (rng.normal(size=same.size) * 0.2 + 0.5 * same).astype(np.float32)
    trials = verification.VerificationTrials(scores, same, labels)
    metrics = verification.verification_metrics(trials)
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        png_files = verification.write_verification_summaries(
            trials, metrics, step=3, png_dir=str(tmp_path)
        )

    summaries = read_summaries(str(tmp_path))
    assert set(summaries) == {
        "eval/eer",
        "eval/target_scores",
        "eval/nontarget_scores",
        "eval/det_curve",
        "eval/score_distributions",
    }
    assert all(list(by_step) == [3] for by_step in summaries.values())
    assert float(summaries["eval/eer"][3]) == pytest.approx(metrics["eer"])
    assert summaries["eval/target_scores"][3][:, 2].sum() == metrics["num_target_trials"] == 80
    assert summaries["eval/nontarget_scores"][3][:, 2].sum() == metrics["num_nontarget_trials"]
    assert summaries["eval/det_curve"][3].shape == CHART_SHAPE
    assert summaries["eval/score_distributions"][3].shape == CHART_SHAPE
    assert_readable(summaries["eval/det_curve"][3], [charts.BLUE, charts.RED, charts.GRID])
    score_legend = [bar_color(charts.GREEN), bar_color(charts.RED), charts.BLACK]
    assert_readable(summaries["eval/score_distributions"][3], score_legend)
    # Beside the events, the same pictures as PNG files.
    assert png_files == [
        str(tmp_path / "eval_det_curve_step3.png"),
        str(tmp_path / "eval_score_distributions_step3.png"),
    ]
    for tag, path in zip(("eval/det_curve", "eval/score_distributions"), png_files, strict=True):
        np.testing.assert_array_equal(read_png(path), summaries[tag][3])
    with tf.summary.create_file_writer(str(tmp_path / "no_png")).as_default():
        assert verification.write_verification_summaries(trials, metrics, step=4) == []
    assert not list((tmp_path / "no_png").glob("*.png"))


@pytest.fixture(scope="module")
def tiny_cyclegan():
    return cyclegan.CycleGAN(
        (8, 8, 1),
        generator_filters=2,
        num_downsamplings=1,
        num_residual_blocks=1,
        discriminator_filters=2,
    )


def test_translation_grid_rows_are_image_translation_cycle(tiny_cyclegan):
    images = tf.random.uniform([3, 8, 8, 1], seed=0)
    forward, backward = tiny_cyclegan.generator_xy, tiny_cyclegan.generator_yx
    grid = translation_snapshots.translation_grid(images, forward, backward)
    assert grid.shape == (1, 3 * 10, 3 * 10, 1)
    translated = forward(images)
    for row in range(3):
        cells = [images[row], translated[row], backward(translated)[row]]
        for column, expected in enumerate(cells):
            cell = grid[0, row * 10 : row * 10 + 10, column * 10 : column * 10 + 10]
            np.testing.assert_allclose(cell[1:-1, 1:-1], expected, atol=1e-6)
            assert np.all(cell[0] == 0.5) and np.all(cell[:, 0] == 0.5)


def test_translation_snapshots_keep_the_first_batch_and_log_every_epoch(tmp_path, tiny_cyclegan):
    pixels = np.arange(4 * 6 * 64, dtype=np.float32).reshape(4, 6, 8, 8, 1) / (4 * 6 * 64)
    batches = tf.data.Dataset.from_tensor_slices({"x": pixels, "y": 1.0 - pixels})
    snapshots = translation_snapshots.TranslationSnapshots(
        str(tmp_path), (8, 8, 1), images_from="the test batches", num_images=4
    )
    snapshots.set_model(tiny_cyclegan)
    snapshots.on_epoch_end(0)  # nothing kept yet: nothing written
    watched = snapshots.watch(batches)
    for epoch in range(2):  # passes after the first leave the kept images as they are
        served = np.stack([batch["x"].numpy() for batch in watched])
        np.testing.assert_array_equal(served, pixels)  # the data goes through unchanged
        snapshots.on_epoch_end(epoch)

    summaries = read_summaries(str(tmp_path / translation_snapshots.TRANSLATIONS_DIR))
    assert set(summaries) == {translation_snapshots.X_CYCLE_TAG, translation_snapshots.Y_CYCLE_TAG}
    kept = {
        translation_snapshots.X_CYCLE_TAG: pixels[0, :4],
        translation_snapshots.Y_CYCLE_TAG: 1.0 - pixels[0, :4],
    }
    for tag, first_images in kept.items():
        assert list(summaries[tag]) == [0, 1]
        np.testing.assert_array_equal(summaries[tag][0], summaries[tag][1])
        image = summaries[tag][1]
        assert image.shape == (4 * 10, 3 * 10, 1)
        # The first column: the kept images (as 8-bit PNG).
        for row in range(4):
            cell = image[row * 10 + 1 : row * 10 + 9, 1:9].astype(np.float32) / 255.0
            np.testing.assert_allclose(cell, first_images[row], atol=1 / 255 + 1e-6)
        # Each grid is also a PNG beside the events: the same pixels, as RGB.
        for epoch in (0, 1):
            png = read_png(
                str(tmp_path / translation_snapshots.TRANSLATIONS_DIR / charts.png_name(tag, epoch))
            )
            np.testing.assert_array_equal(png, np.repeat(summaries[tag][epoch], 3, axis=-1))
