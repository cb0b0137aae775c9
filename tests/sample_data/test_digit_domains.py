"""Tests of `tfx_dynamic_inputs.pipeline.sample_data.write_digit_domains`: real PNG files on
disk."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from tests.materialize.readback import run_files
from tfx_dynamic_inputs.pipeline import sample_data
from tfx_dynamic_inputs.pipeline.sample_data import write_digit_domains


def read_pairs(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def domains(tmp_path_factory):
    return write_digit_domains(str(tmp_path_factory.mktemp("digits") / "domains"))


def test_every_pair_is_same_class_other_image_and_within_counts(domains):
    rows = read_pairs(domains.pairs_path)
    x_ids = [row["x"] for row in rows]
    assert x_ids == sorted(x_ids)
    assert len(set(x_ids)) == domains.num_x == 1797
    counts = []
    for row in rows:
        digit, source = row["x"].split("/")
        assert len(set(row["y"])) == len(row["y"]), row
        assert row["x"] not in row["y"], "an x must not pair with the restyled copy of itself"
        for y in row["y"]:
            assert y.split("/")[0] == digit, row
            assert os.path.isfile(os.path.join(domains.y_dir, y))
        assert os.path.isfile(os.path.join(domains.x_dir, row["x"]))
        counts.append(len(row["y"]))
    assert min(counts) >= 1 and max(counts) <= 8
    # Ragged, and the uniform count distribution reaches both ends on 1,797 draws.
    assert set(counts) == set(range(1, 9))
    assert sum(counts) == domains.num_pairs


def test_images_are_32x32_grayscale_and_domains_differ_in_style(domains):
    x_means, y_means = [], []
    for image_id in ["0/0000.png", "1/0001.png", "7/0007.png", "9/0009.png"]:
        x = Image.open(os.path.join(domains.x_dir, image_id))
        y = Image.open(os.path.join(domains.y_dir, image_id))
        assert x.size == y.size == (32, 32)
        assert x.mode == y.mode == "L"
        x_means.append(np.asarray(x).mean())
        y_means.append(np.asarray(y).mean())
    # X: bright strokes on black; Y: dark (and thicker) strokes on white.
    assert max(x_means) < 100 and min(y_means) > 128
    # Thicker strokes: Y inks more pixels than X.
    assert np.mean(255 - np.array(y_means)) > np.mean(x_means)


def test_y_shows_the_same_digit_as_its_folder_says(domains):
    """Per class, the mean un-inverted Y image matches the mean X image of that class best."""
    x_means, y_means = {}, {}
    for digit in range(10):
        names = sorted(os.listdir(os.path.join(domains.x_dir, str(digit))))[:40]
        load = lambda root, n, d=digit: np.asarray(  # noqa: B023
            Image.open(os.path.join(root, str(d), n)), np.float64
        )
        x_means[digit] = np.mean([load(domains.x_dir, n) for n in names], axis=0).ravel()
        y_means[digit] = np.mean([255 - load(domains.y_dir, n) for n in names], axis=0).ravel()
    for digit in range(10):
        similarity = [np.corrcoef(y_means[digit], x_means[other])[0, 1] for other in range(10)]
        assert int(np.argmax(similarity)) == digit, similarity


def test_same_arguments_give_identical_bytes_and_other_seed_other_pairs(tmp_path, domains):
    again = write_digit_domains(str(tmp_path / "again"))
    first = run_files(os.path.dirname(domains.pairs_path))
    assert run_files(os.path.dirname(again.pairs_path)) == first
    other = write_digit_domains(str(tmp_path / "other"), seed=1)
    assert read_pairs(other.pairs_path) != read_pairs(domains.pairs_path)
    # The seed changes the jitter of Y, never X.
    x_image = "3/0003.png"
    assert run_files(other.x_dir)[x_image] == run_files(domains.x_dir)[x_image]


def test_second_call_with_same_parameters_writes_nothing(domains):
    output_dir = os.path.dirname(domains.pairs_path)
    before = {p: os.stat(os.path.join(output_dir, p)).st_mtime_ns for p in run_files(output_dir)}
    again = write_digit_domains(output_dir)
    assert again == domains
    after = {p: os.stat(os.path.join(output_dir, p)).st_mtime_ns for p in run_files(output_dir)}
    assert after == before


def test_other_parameters_on_a_written_folder_need_overwrite(tmp_path):
    output_dir = str(tmp_path / "domains")
    small = write_digit_domains(output_dir, image_size=8, max_pairs_per_x=2)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_digit_domains(output_dir, image_size=16)
    replaced = write_digit_domains(
        output_dir, image_size=16, min_pairs_per_x=3, max_pairs_per_x=3, overwrite=True
    )
    assert small.pairs_path == replaced.pairs_path
    assert Image.open(os.path.join(replaced.x_dir, "5/0005.png")).size == (16, 16)
    assert {len(row["y"]) for row in read_pairs(replaced.pairs_path)} == {3}


def test_a_foreign_non_empty_folder_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        write_digit_domains(str(tmp_path))
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"image_size": 4}, "image_size"),
        ({"min_pairs_per_x": 0}, "min_pairs_per_x"),
        ({"min_pairs_per_x": 5, "max_pairs_per_x": 4}, "min_pairs_per_x"),
        ({"max_shift_pixels": -1}, "must not be negative"),
    ],
)
def test_bad_arguments_are_refused_before_writing(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        write_digit_domains(str(tmp_path / "domains"), **kwargs)
    assert not (tmp_path / "domains").exists()


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("bounds", [(1, 1), (1, 8), (4, 6), (10, 30)])
def test_pair_sampling_keeps_its_rules_over_seeds_and_bounds(seed, bounds):
    rng = np.random.default_rng(seed)
    digits = rng.integers(0, 4, size=200)
    valid_pairs = sample_data._sample_valid_pairs(digits, rng, *bounds)
    for x, ys in enumerate(valid_pairs):
        same_class_others = np.count_nonzero(digits == digits[x]) - 1
        assert bounds[0] <= len(ys) <= min(bounds[1], same_class_others)
        assert np.all(np.diff(ys) > 0)
        assert np.all(digits[ys] == digits[x]) and x not in ys


def test_a_class_too_small_for_min_pairs_is_an_error():
    digits = np.array([0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="digit 1 has 1 other images"):
        sample_data._sample_valid_pairs(digits, np.random.default_rng(0), 2, 4)
