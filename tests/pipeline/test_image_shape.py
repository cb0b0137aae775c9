"""`run_local cyclegan` stores and trains images at the shape of the data unless told otherwise,
and says so (issue 47, item 5): on 28-56 px RGB images it used to train at 16 x 16 grey, said
only in summary.json. `image_shape.resolve` infers `image_size` (the median larger side, rounded
to a multiple of 4) and `channels` (3 when any image is in colour) where the config leaves them
None; given values stand, with one warning line when they shrink most images or drop colour."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.pipeline import cli, config, config_checks, image_shape, run_local

SIDES = st.integers(28, 56)
# (width, height, format) of each image of a folder.
RGB_IMAGES = st.lists(
    st.tuples(SIDES, SIDES, st.sampled_from(["png", "jpg"])), min_size=1, max_size=8
)


def _write(folder: str, images: list[tuple[int, int, str]], mode: str = "RGB", seed: int = 0):
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    for index, (width, height, suffix) in enumerate(images):
        grey = rng.integers(0, 256, (height, width), dtype=np.uint8)
        rgb = Image.fromarray(np.stack([grey, grey[::-1], 255 - grey], axis=-1))
        if mode == "RGB":
            pixels = rgb
        elif mode == "I;16":
            pixels = Image.fromarray(grey.astype(np.uint16) * 257)
        elif mode == "grey palette":
            pixels = Image.fromarray(grey).convert("P")
        elif mode == "colour palette":
            pixels = rgb.convert("P", palette=Image.Palette.ADAPTIVE)
        else:
            pixels = Image.fromarray(grey).convert(mode)
        pixels.save(os.path.join(folder, f"{index:03d}.{suffix}"))


def _config(root: str, **fields) -> config.CycleGanConfig:
    return config.CycleGanConfig(
        x_dir=os.path.join(root, "x"),
        y_dir=os.path.join(root, "y"),
        groups_from_subfolder=True,
        **fields,
    )


@settings(max_examples=25, deadline=None)
@given(x_images=RGB_IMAGES, y_images=RGB_IMAGES)
def test_rgb_images_of_28_to_56_px_infer_rgb_at_a_side_the_networks_take(x_images, y_images):
    with tempfile.TemporaryDirectory() as root:
        _write(os.path.join(root, "x"), x_images)
        _write(os.path.join(root, "y"), y_images)
        gan = _config(root)
        assert (gan.image_size, gan.channels) == (None, None)  # the defaults ask to infer

        resolved, shape = image_shape.resolve(gan)

    assert resolved.channels == shape.channels == 3
    sides = sorted(max(width, height) for width, height, _ in x_images + y_images)
    assert resolved.image_size == shape.image_size
    assert resolved.image_size % 4 == 0
    # The median larger side, to the nearest multiple of 4: never the old 16 of 28-56 px images.
    assert abs(resolved.image_size - sides[(len(sides) - 1) // 2]) <= 2
    assert 28 <= resolved.image_size <= 56
    config_checks.check_image_size(resolved.image_size)  # the config's own bound
    assert shape.size_inferred and shape.channels_inferred and not shape.capped
    assert shape.sample.in_colour == len(sides) and sorted(shape.sample.sides) == sides
    line = shape.line()
    assert "\n" not in line
    assert line.startswith(
        f"images: {resolved.image_size} x {resolved.image_size} px (inferred), 3 channels "
        "(inferred);"
    )
    assert shape.warning() is None


def test_the_networks_build_at_the_inferred_shape(tmp_path):
    from tfx_dynamic_inputs.models import cyclegan_networks

    _write(str(tmp_path / "x"), [(30, 41, "png"), (55, 50, "jpg"), (46, 46, "png")])
    _write(str(tmp_path / "y"), [(28, 28, "png"), (56, 33, "png")])
    resolved, _ = image_shape.resolve(_config(str(tmp_path)))
    shape = (resolved.image_size, resolved.image_size, resolved.channels)
    assert shape == (48, 48, 3)  # larger sides 28, 41, 46, 55, 56: median 46 -> 48
    assert cyclegan_networks.build_generator(shape).output_shape == (None, *shape)
    assert cyclegan_networks.build_discriminator(shape).output_shape == (None, 12, 12, 1)


@settings(max_examples=20, deadline=None)
@given(images=RGB_IMAGES, image_size=st.sampled_from([8, 16, 20, 24]))
def test_a_given_side_below_the_inputs_is_one_warning_line(images, image_size):
    with tempfile.TemporaryDirectory() as root:
        _write(os.path.join(root, "x"), images)
        _write(os.path.join(root, "y"), images)
        resolved, shape = image_shape.resolve(_config(root, image_size=image_size))

    assert (resolved.image_size, resolved.channels) == (image_size, 3)  # given stands
    assert not shape.size_inferred and shape.channels_inferred
    warning = shape.warning()
    assert warning is not None and "\n" not in warning
    assert warning.startswith(
        f"warning: image_size {image_size} shrinks {2 * len(images)} of the "
        f"{2 * len(images)} sampled images"
    )
    assert "colour" not in warning  # the channels were inferred: nothing dropped


def test_given_grey_channels_on_colour_images_warn_and_both_losses_share_the_line(tmp_path):
    _write(str(tmp_path / "x"), [(40, 40, "png")] * 3)
    _write(str(tmp_path / "y"), [(40, 40, "jpg")] * 3)

    _, grey = image_shape.resolve(_config(str(tmp_path), channels=1))
    assert grey.warning() == (
        "warning: channels 1 drops the colour of 6 of them: leave channels unset to infer from "
        "the images"
    )
    _, old_defaults = image_shape.resolve(_config(str(tmp_path), image_size=16, channels=1))
    assert old_defaults.warning() == (
        "warning: image_size 16 shrinks 6 of the 6 sampled images (median side 40 px); channels "
        "1 drops the colour of 6 of them: leave image_size and channels unset to infer from the "
        "images"
    )
    # Given values the images fit (larger, or colour kept) are not warned about.
    for fields in ({"image_size": 40, "channels": 3}, {"image_size": 64, "channels": 4}):
        assert image_shape.resolve(_config(str(tmp_path), **fields))[1].warning() is None


@pytest.mark.parametrize("mode", ["L", "I;16", "1", "grey palette"])
def test_grey_inputs_infer_one_channel(tmp_path, mode):
    _write(str(tmp_path / "x"), [(30, 30, "png"), (34, 30, "png")], mode=mode)
    _write(str(tmp_path / "y" / "sub"), [(31, 29, "png")], mode="L")

    resolved, shape = image_shape.resolve(_config(str(tmp_path)))

    assert resolved.channels == 1
    assert resolved.image_size == 32
    assert shape.sample.in_colour == 0
    assert shape.line().startswith("images: 32 x 32 px (inferred), 1 channel (inferred);")


def test_one_colour_image_among_grey_ones_infers_rgb(tmp_path):
    _write(str(tmp_path / "x"), [(30, 30, "png")] * 4, mode="L")
    _write(str(tmp_path / "y"), [(30, 30, "png")], mode="colour palette")
    resolved, shape = image_shape.resolve(_config(str(tmp_path)))
    assert (resolved.channels, shape.sample.in_colour) == (3, 1)


def test_the_side_is_capped_rounded_to_the_generators_multiple_and_said(tmp_path):
    _write(str(tmp_path / "x"), [(300, 280, "jpg")])
    _write(str(tmp_path / "y"), [(320, 200, "jpg")])
    resolved, shape = image_shape.resolve(_config(str(tmp_path)))
    assert resolved.image_size == image_shape.MAX_INFERRED_SIDE and shape.capped
    assert "(inferred, capped at 256)" in shape.line()

    _write(str(tmp_path / "small" / "x"), [(44, 44, "png")])
    _write(str(tmp_path / "small" / "y"), [(44, 40, "png")])
    deeper = {"learning_rate": 2e-4, "num_downsamplings": 4}  # the generator needs 16
    resolved, _ = image_shape.resolve(_config(str(tmp_path / "small"), custom_config=deeper))
    assert resolved.image_size == 48  # 44 to the nearest multiple of 16


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"image_size": 10}, "CycleGanConfig.image_size must be a multiple of 4 (the CycleGAN"),
        (
            {"image_size": 20, "custom_config": {"num_downsamplings": 3}},
            "CycleGanConfig.image_size must be a multiple of 8",
        ),
    ],
)
def test_a_given_side_the_networks_cannot_take_is_one_line(tmp_path, fields, message):
    _write(str(tmp_path / "x"), [(40, 40, "png")])
    _write(str(tmp_path / "y"), [(40, 40, "png")])
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        image_shape.resolve(_config(str(tmp_path), **fields))
    assert "\n" not in str(raised.value)


def test_nothing_to_infer_from_is_one_line_naming_the_folders(tmp_path):
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "not-an-image.png").write_bytes(b"text, not a PNG")
    with pytest.raises(ValueError, match=r"x and .*y: no readable PNG or JPEG image among the 2"):
        image_shape.resolve(_config(str(tmp_path)))
    # Given values need nothing inferred: the job rejects the files itself.
    resolved, shape = image_shape.resolve(_config(str(tmp_path), image_size=16, channels=1))
    assert (resolved.image_size, shape.sample, shape.warning()) == (16, None, None)
    with pytest.raises(ValueError, match="gs://bucket/x: the images of a remote folder"):
        image_shape.resolve(
            config.CycleGanConfig(x_dir="gs://bucket/x", y_dir="gs://bucket/y", pairs="p.jsonl")
        )


def test_run_local_says_the_inferred_shape_in_one_line_before_the_run(tmp_path, capsys):
    _write(str(tmp_path / "x" / "a"), [(28, 40, "png"), (56, 56, "jpg"), (44, 30, "png")])
    _write(str(tmp_path / "y" / "a"), [(50, 36, "png"), (33, 33, "jpg")])
    data = ["--x_dir", str(tmp_path / "x"), "--y_dir", str(tmp_path / "y")]
    argv = ["cyclegan", *data, "--groups_from_subfolder", "--work_dir", str(tmp_path / "w")]
    gan, _ = run_local.local_configs(cli.parse_local_args(argv))
    run_local.check_inputs(gan)

    resolved, shape = run_local.resolve_images(gan)

    assert (resolved.image_size, resolved.channels) == (44, 3)
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"run_local cyclegan: {shape.line()}"]
    assert out.startswith(
        "run_local cyclegan: images: 44 x 44 px (inferred), 3 channels (inferred); 5 sampled "
        "of 5 images: sides 33 to 56 px, median 44, 5 in colour"
    )
    assert err == ""

    # The old defaults, given: they stand, and one warning line says what they lose.
    old = cli.parse_local_args([*argv, "--image_size", "16", "--channels", "1"])
    resolved, _ = run_local.resolve_images(run_local.local_configs(old)[0])
    assert (resolved.image_size, resolved.channels) == (16, 1)
    out, err = capsys.readouterr()
    assert out.startswith("run_local cyclegan: images: 16 x 16 px (given), 1 channel (given);")
    assert err.splitlines() == [
        "warning: image_size 16 shrinks 5 of the 5 sampled images (median side 44 px); channels "
        "1 drops the colour of 5 of them: leave image_size and channels unset to infer from the "
        "images"
    ]

    bad = cli.parse_local_args([*argv, "--image_size", "30"])
    with pytest.raises(cli.ConfigError, match="image_size must be a multiple of 4"):
        run_local.resolve_images(run_local.local_configs(bad)[0])


def test_the_bundled_digits_keep_their_shape_without_a_warning(tmp_path, capsys):
    args = cli.parse_local_args(["cyclegan", "--work_dir", str(tmp_path)])
    gan, _ = run_local.local_configs(args)
    assert (gan.image_size, gan.channels) == (config.DIGITS_IMAGE_SIZE, 1) == (16, 1)

    resolved, shape = run_local.resolve_images(gan)

    assert resolved == gan
    out, err = capsys.readouterr()
    assert out.startswith("run_local cyclegan: images: 16 x 16 px (given), 1 channel (given);")
    assert err == "" and shape.warning() is None
    eight = cli.parse_local_args(["cyclegan", "--work_dir", str(tmp_path / "8"), "--image_size=8"])
    assert run_local.local_configs(eight)[0].image_size == 8  # as the tests' overrides


def test_the_report_and_the_pipeline_carry_the_resolved_shape(tmp_path):
    from tfx_dynamic_inputs.pipeline import cyclegan_pipeline, report

    _write(str(tmp_path / "x"), [(40, 36, "png")] * 2)
    _write(str(tmp_path / "y"), [(36, 40, "png")] * 2)
    gan = _config(str(tmp_path))
    resolved, shape = image_shape.resolve(gan)

    described = report.describe("t", resolved, [], {}, shape).splitlines()
    assert f"== {shape.line()}" in described
    # Without the resolution's record (the demo's configs): the config's shape.
    plain = report.describe("t", resolved, [], {}).splitlines()
    assert "== images: 40 x 40 px, 3 channels" in plain
    # A config built in Python with the shape left None is resolved by the pipeline itself.
    run = config.RunConfig(pipeline_root=str(tmp_path / "root"))
    [trainer] = [
        node
        for node in cyclegan_pipeline.create_pipeline(gan, run).components
        if node.id == "PairsTrainer"
    ]
    options = json.loads(trainer.exec_properties[keys.INPUT_OPTIONS_KEY])
    assert options["image"] == {"height": 40, "width": 40, "channels": 3}


def test_kubeflow_specs_take_the_digits_shape_or_ask_for_one():
    pytest.importorskip("kfp")
    from tfx_dynamic_inputs.kubeflow import compile_checks, runner

    kubeflow = config.KubeflowConfig()
    digits, speaker = runner.pipeline_configs("/app/sample_data", "/app/schemas")
    assert (digits.image_size, digits.channels) == (16, 1)
    compile_checks.check_compile(kubeflow, digits, speaker)

    own, _ = runner.pipeline_configs(
        "/app/sample_data", "/app/schemas", cyclegan={"x_dir": "gs://b/x", "y_dir": "gs://b/y"}
    )
    assert own.image_size is None
    with pytest.raises(cli.ConfigError, match="cyclegan: give image_size and channels"):
        compile_checks.check_compile(kubeflow, own, speaker)
    given = dataclasses.replace(own, image_size=64, channels=3)
    compile_checks.check_compile(kubeflow, given, speaker)
