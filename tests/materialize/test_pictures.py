"""`pictures.write_run_pictures` on the summaries of real runs, and `tensorboard_hint`."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers.paths import REPO_ROOT
from tests.materialize.pair_inputs import write_pairs_inputs
from tests.materialize.test_audio_job import write_corpus
from tests.models.chart_checks import assert_readable, read_png
from tests.models.events import read_summaries
from tfx_dynamic_inputs.materialize import AudioConfig, PairsConfig, pictures, run_audio, run_pairs
from tfx_dynamic_inputs.models import charts

CHART_SHAPE = (charts.HEIGHT, charts.WIDTH, 3)


@pytest.fixture(scope="module")
def pairs_run(tmp_path_factory):
    """A pairs run whose 12 x have 1 to 5 valid y each."""
    root = tmp_path_factory.mktemp("pairs")
    rng = np.random.default_rng(0)
    x_names = [f"x{i:02d}.png" for i in range(12)]
    y_names = [f"y{i:02d}.png" for i in range(8)]
    pairs = {x: y_names[: 1 + i % 5] for i, x in enumerate(x_names)}
    inputs = write_pairs_inputs(root, x_names, y_names, pairs, rng)
    output_dir = str(root / "out")
    summary = run_pairs(
        PairsConfig(
            x_dir=inputs["x"], y_dir=inputs["y"], pairs=inputs["pairs"], output_dir=output_dir
        )
    )
    return output_dir, summary, np.array([1 + i % 5 for i in range(12)])


def test_pairs_run_gets_its_degree_histogram(pairs_run):
    output_dir, summary, degrees = pairs_run
    log_dir = pictures.write_run_pictures(output_dir, summary)
    assert (
        log_dir == os.path.join(output_dir, "tensorboard") == pictures.run_pictures_dir(output_dir)
    )

    summaries = read_summaries(log_dir)
    assert set(summaries) == {"pairs/degree", "pairs/degree_chart"}
    histogram = summaries["pairs/degree"][0]
    assert histogram[:, 2].sum() == len(degrees) == summary["record_sets"]["x"]["num_records"]
    assert (histogram[0, 0], histogram[-1, 1]) == (degrees.min(), degrees.max())
    # Every degree 1..5 has its own bucket, holding the x records of that degree.
    assert histogram[:, 2].tolist() == np.bincount(degrees)[1:].tolist()
    chart = summaries["pairs/degree_chart"][0]
    assert chart.shape == CHART_SHAPE
    assert_readable(chart, legend_colors=())  # one series: no legend
    # Beside the events, the chart as a PNG file.
    others = [name for name in os.listdir(log_dir) if not name.startswith("events.out.tfevents")]
    assert others == ["pairs_degree.png"]
    np.testing.assert_array_equal(read_png(os.path.join(log_dir, "pairs_degree.png")), chart)

    # A rerun replaces the pictures rather than adding a second event file next to them.
    pictures.write_run_pictures(output_dir, summary)
    assert len(glob.glob(os.path.join(log_dir, "events.out.tfevents*"))) == 1
    assert glob.glob(os.path.join(log_dir, "*.png")) == [os.path.join(log_dir, "pairs_degree.png")]


def test_pictures_refuse_what_they_cannot_show(pairs_run):
    output_dir, summary, _ = pairs_run
    with pytest.raises(ValueError, match="failed run: no records"):
        pictures.write_run_pictures(output_dir, {**summary, "ok": False, "error": "no records"})
    with pytest.raises(ValueError, match="job 'video'"):
        pictures.write_run_pictures(output_dir, {**summary, "job": "video"})
    other = {**summary, "pairs": {**summary["pairs"], "num_pairs": 1}}
    with pytest.raises(ValueError, match="not this run's"):
        pictures.write_run_pictures(output_dir, other)


def test_audio_run_gets_utterances_per_speaker_histograms(tmp_path):
    rows, _ = write_corpus(str(tmp_path / "audio"), np.random.default_rng(0))
    with open(tmp_path / "manifest.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    output_dir = str(tmp_path / "out")
    summary = run_audio(
        AudioConfig(
            manifest=str(tmp_path / "manifest.jsonl"),
            root=str(tmp_path / "audio"),
            output_dir=output_dir,
            eval_fraction=0.3,
        )
    )
    log_dir = pictures.write_run_pictures(output_dir, summary)
    summaries = read_summaries(log_dir)

    record_sets = summary["record_sets"]
    assert sorted(record_sets) == ["eval", "train"]
    assert set(summaries) == {
        f"utterances_per_speaker/{name}{suffix}"
        for name in record_sets
        for suffix in ("", pictures.CHART_SUFFIX)
    }
    for name, stats in record_sets.items():
        histogram = summaries[f"utterances_per_speaker/{name}"][0]
        per_speaker = list(stats["class_counts"].values())
        assert histogram[:, 2].sum() == stats["num_classes"] == len(per_speaker)
        assert (histogram[0, 0], histogram[-1, 1]) == (min(per_speaker), max(per_speaker))
        chart = summaries[f"utterances_per_speaker/{name}_chart"][0]
        assert chart.shape == CHART_SHAPE
        assert_readable(chart, legend_colors=())
        png = os.path.join(log_dir, f"utterances_per_speaker_{name}.png")
        np.testing.assert_array_equal(read_png(png), chart)
    assert len(glob.glob(os.path.join(log_dir, "*.png"))) == len(record_sets)


def test_tensorboard_hint_names_every_log_dir():
    hint = pictures.tensorboard_hint({"cyclegan": "/runs/model_run", "pairs": "/out/tensorboard"})
    assert hint.splitlines()[1:] == [
        "  cyclegan  tensorboard --logdir /runs/model_run",
        "  pairs     tensorboard --logdir /out/tensorboard",
        "  all       tensorboard --logdir_spec cyclegan:/runs/model_run,pairs:/out/tensorboard",
        "PNG files of the charts (DET curves, histograms): *.png in the folders above",
    ]
    with pytest.raises(ValueError, match="without ',' or ':'"):
        pictures.tensorboard_hint({"a:b": "/x"})


def test_importing_the_pictures_does_not_import_tensorflow():
    # The job's modules may import it, and Beam workers must not import TensorFlow.
    script = (
        "import sys, tfx_dynamic_inputs.materialize.pictures; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, check=True)
