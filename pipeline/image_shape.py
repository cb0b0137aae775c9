"""The side and channels a CycleGAN run stores its images at, inferred from the images when the
config leaves them None.

The pairs job resizes every image once to `image_size x image_size x channels` raw pixels
(`materialize.images.ImageStorage`), and the networks train at that shape. A fixed default
shrank any data set to it silently: `run_local cyclegan` on 28-56 px RGB images trained at
16 x 16 grey, said only in the run's summary.json. So `CycleGanConfig.image_size` and `channels`
default to None, and `resolve` fills them before the pipeline is built, from the headers of a
bounded, evenly spread sample of the x and y images (Pillow's `Image.open` reads the header only:
size and mode; no pixel is decoded):

- `image_size`: the median of the images' larger sides, rounded to the nearest multiple the
  networks take (`side_multiple`) and at most `MAX_INFERRED_SIDE`;
- `channels`: 3 when any sampled image is in colour (alpha is dropped, as raw storage does),
  else 1.

Given values are kept; `ImageShape.warning` says, in one line, when they shrink most of the
sampled images or drop their colour, and a given side the networks cannot take is a ValueError
now instead of the trainer's after the Beam job. Nothing here imports TensorFlow or Beam.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from PIL import Image

from tfx_dynamic_inputs.materialize.config import IMAGE_EXTENSIONS, MAX_IMAGE_PIXELS
from tfx_dynamic_inputs.pipeline.config import CycleGanConfig

# Image files listed per folder at most (a sorted walk, so the sample is the same run to run),
# and headers read over both folders: enough for a median, a fraction of a second on local disk.
MAX_LISTED_FILES = 100_000
MAX_SAMPLED_IMAGES = 256
# The largest side inferred: the reference CycleGAN's 256 x 256 (larger inputs, e.g. Cityscapes'
# 2048 x 1024, are resized to it); a larger side is for the config to ask.
MAX_INFERRED_SIDE = 256
# What the networks take (`models.cyclegan_networks`): the PatchGAN needs sides divisible by 4,
# the generator by 2**num_downsamplings (`custom_config`, default `CycleGAN`'s 2).
DISCRIMINATOR_SIDE_MULTIPLE = 4
DEFAULT_NUM_DOWNSAMPLINGS = 2
# The formats the pairs job reads (`materialize.images`, which imports Beam, so not imported).
IMAGE_FORMATS = ("PNG", "JPEG")
# Pillow modes without colour; a palette image is in colour when its palette is.
_GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
_PALETTE_MODES = frozenset({"P", "PA"})


@dataclasses.dataclass(frozen=True)
class ImageSample:
    """What the headers of the sampled images say.

    Args:
      folders: the folders sampled.
      listed: image files found (up to `MAX_LISTED_FILES` per folder).
      sides: the larger side of each sampled image the pairs job would read (unreadable headers
        and images over `MAX_IMAGE_PIXELS`, which it rejects, left out).
      in_colour: how many of those are in colour.
    """

    folders: tuple[str, ...]
    listed: int
    sides: tuple[int, ...]
    in_colour: int

    @property
    def median_side(self) -> int:
        """The median of `sides` (the lower one of an even count)."""
        return statistics.median_low(self.sides)

    def describe(self) -> str:
        """One clause: how many images were read, their sides and colour."""
        return (
            f"{len(self.sides)} sampled of {self.listed} images: sides {min(self.sides)} to "
            f"{max(self.sides)} px, median {self.median_side}, {self.in_colour} in colour"
        )


@dataclasses.dataclass(frozen=True)
class ImageShape:
    """The shape a CycleGAN run stores and trains its images at, and where it came from.

    Args:
      image_size: the side, in pixels.
      channels: 1 (grey), 3 (RGB) or 4 (RGBA).
      size_inferred: whether `image_size` was inferred (else given).
      channels_inferred: whether `channels` was inferred (else given).
      sample: what the sampled headers said; None when no image was read (a remote folder with
        both values given).
      capped: whether the inferred side was cut to `MAX_INFERRED_SIDE`.
    """

    image_size: int
    channels: int
    size_inferred: bool
    channels_inferred: bool
    sample: ImageSample | None
    capped: bool = False

    def line(self) -> str:
        """The one line a run prints: the shape, what was inferred or given, and from what."""
        size_source = "inferred" if self.size_inferred else "given"
        if self.capped:
            size_source += f", capped at {MAX_INFERRED_SIDE}"
        channel_source = "inferred" if self.channels_inferred else "given"
        plural = "" if self.channels == 1 else "s"
        found = f"; {self.sample.describe()}" if self.sample is not None else ""
        return (
            f"images: {self.image_size} x {self.image_size} px ({size_source}), "
            f"{self.channels} channel{plural} ({channel_source}){found}"
        )

    def warning(self) -> str | None:
        """One line when given values shrink most sampled images or drop their colour, else
        None."""
        if self.sample is None:
            return None
        losses, remedies = [], []
        shrunk = sum(side > self.image_size for side in self.sample.sides)
        if not self.size_inferred and self.image_size < self.sample.median_side:
            losses.append(
                f"image_size {self.image_size} shrinks {shrunk} of the {len(self.sample.sides)} "
                f"sampled images (median side {self.sample.median_side} px)"
            )
            remedies.append("image_size")
        if not self.channels_inferred and self.channels == 1 and self.sample.in_colour:
            losses.append(f"channels 1 drops the colour of {self.sample.in_colour} of them")
            remedies.append("channels")
        if not losses:
            return None
        return (
            f"warning: {'; '.join(losses)}: leave {' and '.join(remedies)} unset to infer "
            "from the images"
        )


def side_multiple(custom_config: Mapping[str, Any]) -> int:
    """The multiple of which the networks take image sides.

    Args:
      custom_config: the trainer's custom config (its `num_downsamplings`, when set).

    Returns:
      The least common multiple of the discriminator's 4 and the generator's
      2**num_downsamplings (both powers of two: the larger).
    """
    downsamplings = custom_config.get("num_downsamplings", DEFAULT_NUM_DOWNSAMPLINGS)
    if isinstance(downsamplings, bool) or not isinstance(downsamplings, int) or downsamplings < 0:
        raise ValueError(
            "CycleGanConfig.custom_config num_downsamplings must be an int >= 0, got "
            f"{downsamplings!r}"
        )
    return max(DISCRIMINATOR_SIDE_MULTIPLE, 2**downsamplings)


def choose_side(sides: Sequence[int], multiple: int) -> tuple[int, bool]:
    """The side inferred from images' sides.

    Args:
      sides: the sampled images' larger sides (at least one).
      multiple: what the side must be a multiple of (`side_multiple`).

    Returns:
      `(side, capped)`: the median side rounded to the nearest multiple (halves up; at least
      `multiple`), at most `MAX_INFERRED_SIDE` rounded down to a multiple (and whether that cut
      it).
    """
    median = statistics.median_low(sides)
    rounded = max(multiple, (median + multiple // 2) // multiple * multiple)
    cap = max(multiple, MAX_INFERRED_SIDE // multiple * multiple)
    return min(rounded, cap), rounded > cap


def sample_images(folders: Sequence[str], max_images: int = MAX_SAMPLED_IMAGES) -> ImageSample:
    """Reads the headers of up to `max_images` images, spread evenly over each folder's sorted
    files (an equal share per folder).

    Args:
      folders: local folders of images (PNG/JPEG, in subfolders too).
      max_images: headers read at most, over all folders.

    Returns:
      The `ImageSample`.

    Raises:
      ValueError: a folder is not local (`scheme://...`): its images are not read here.
    """
    share = max(1, max_images // max(1, len(folders)))
    listed, sides, in_colour = 0, [], 0
    for folder in folders:
        if "://" in folder:
            raise ValueError(
                f"{folder}: the images of a remote folder are not sampled; give "
                "CycleGanConfig.image_size and channels"
            )
        if not os.path.isdir(folder):
            raise ValueError(f"{folder}: no such folder to sample images from")
        files = _image_files(folder)
        listed += len(files)
        picked = sorted({len(files) * i // share for i in range(share)}) if files else []
        for index in picked:
            header = _read_header(files[index])
            if header is not None:
                sides.append(header[0])
                in_colour += header[1]
    return ImageSample(tuple(folders), listed, tuple(sides), in_colour)


def resolve(config: CycleGanConfig) -> tuple[CycleGanConfig, ImageShape]:
    """`config` with `image_size` and `channels` set (inferred where None), and how.

    Args:
      config: the CycleGAN config; its image folders must exist.

    Returns:
      `(config with both set, ImageShape)`; the images are sampled unless both are given and a
      folder is remote.

    Raises:
      ValueError: one line: a value to infer from a remote folder or from folders without a
        readable image, or a side the networks do not take.
    """
    multiple = side_multiple(config.custom_config)
    folders = (config.x_dir, config.y_dir)
    if config.image_size is not None and config.image_size % multiple:
        raise ValueError(
            f"CycleGanConfig.image_size must be a multiple of {multiple} (the CycleGAN "
            f"networks' downsamplings), got {config.image_size}"
        )
    inferring = config.image_size is None or config.channels is None
    sample = None
    if inferring or not any("://" in folder for folder in folders):
        sample = sample_images(folders)
        if not sample.sides:
            if inferring:
                raise ValueError(
                    f"{' and '.join(folders)}: no readable PNG or JPEG image among the "
                    f"{sample.listed} listed to infer CycleGanConfig.image_size and channels "
                    "from"
                )
            sample = None
    image_size, capped = config.image_size, False
    if image_size is None:
        image_size, capped = choose_side(sample.sides, multiple)
    channels = config.channels
    if channels is None:
        channels = 3 if sample.in_colour else 1
    shape = ImageShape(
        image_size=image_size,
        channels=channels,
        size_inferred=config.image_size is None,
        channels_inferred=config.channels is None,
        sample=sample,
        capped=capped,
    )
    return dataclasses.replace(config, image_size=image_size, channels=channels), shape


def _image_files(folder: str) -> list[str]:
    """The image files below `folder` by extension, in sorted order, up to MAX_LISTED_FILES."""
    found = []
    for path in _walk_sorted(folder):
        if path.lower().endswith(IMAGE_EXTENSIONS):
            found.append(path)
            if len(found) == MAX_LISTED_FILES:
                break
    return found


def _walk_sorted(folder: str) -> Iterator[str]:
    """The regular files below `folder`, depth first in name order. Symlinked folders are not
    followed (the pairs job lists them as files, then rejects them or lists their real path);
    an unreadable subfolder is left out of the sample (the pairs job reports its files)."""
    pending = [folder]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            if directory == folder:
                raise
            continue
        subfolders = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subfolders.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                yield entry.path
        pending.extend(reversed(subfolders))


def _read_header(path: str) -> tuple[int, bool] | None:
    """(larger side, in colour) from the image's header; None for what the pairs job rejects:
    a header Pillow cannot read, or more than MAX_IMAGE_PIXELS."""
    try:
        with warnings.catch_warnings():
            # MAX_IMAGE_PIXELS, checked below, stands in for Pillow's bomb warning.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path, formats=IMAGE_FORMATS) as image:
                width, height = image.size
                if width * height > MAX_IMAGE_PIXELS:
                    return None
                return max(width, height), _in_colour(image)
    except Exception:  # Any reader failure is this file's: the pairs job rejects it.
        return None


def _in_colour(image: Image.Image) -> bool:
    if image.mode in _PALETTE_MODES:
        # The palette as the header holds it (getpalette() would decode the pixels).
        palette = image.palette
        if palette is None or palette.rawmode not in (None, "RGB"):
            return True
        entries = bytes(palette.palette)
        return any(
            entries[i] != entries[i + 1] or entries[i] != entries[i + 2]
            for i in range(0, len(entries) - 2, 3)
        )
    return image.mode not in _GREY_MODES
