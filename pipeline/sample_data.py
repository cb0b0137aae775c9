"""Bundled sample data of the demo pipelines: two image domains and their valid-pair list.

The images come from scikit-learn's bundled 8x8 digits (1,797 images, no download):

- domain X: each digit upscaled to `image_size` x `image_size` grayscale, white strokes on black;
- domain Y: the same digits in another style: slightly rotated and shifted, strokes thickened
  (a grey dilation), then inverted to dark strokes on white.

Y keeps one channel on purpose: both domains then share one record kind (one schema, one decoder
in the Beam stage) and the CycleGAN generators map [H, W, 1] to [H, W, 1]. Polarity and stroke
width are still a change every image shows, which a small generator learns in a few epochs, so
the demo's cycle loss moves visibly.

Each x may pair only with a few y of its own digit class (a ragged count between
`min_pairs_per_x` and `max_pairs_per_x`), and never with the restyled copy of its own source
image: the pairs are unpaired in the CycleGAN sense, constrained only by class.

Written layout (ids are paths relative to their domain folder)::

    <output_dir>/x/<digit>/<source index>.png
    <output_dir>/y/<digit>/<source index>.png
    <output_dir>/pairs.jsonl     one {"x": id, "y": [ids...]} per x, in id order
    <output_dir>/domains.json    the parameters and counts; a second call with the same
                                 parameters finds it and writes nothing, so files keep their
                                 modification times (and input fingerprints stay stable)
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tempfile

import numpy as np
from PIL import Image, ImageFilter

X_DIR = "x"
Y_DIR = "y"
PAIRS_FILE = "pairs.jsonl"
DOMAINS_FILE = "domains.json"
# Bumped whenever the written bytes change for the same parameters.
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class DigitDomains:
    """Where `write_digit_domains` put the two domains and their valid-pair list."""

    x_dir: str
    y_dir: str
    pairs_path: str
    num_x: int
    num_y: int
    num_pairs: int


def write_digit_domains(
    output_dir: str,
    *,
    seed: int = 0,
    image_size: int = 32,
    min_pairs_per_x: int = 1,
    max_pairs_per_x: int = 8,
    max_rotation_degrees: float = 12.0,
    max_shift_pixels: int = 2,
    overwrite: bool = False,
) -> DigitDomains:
    """Writes the digit domains X and Y as PNG files and their class-constrained pair list.

    Args:
      output_dir: local folder; created if missing.
      seed: seeds the Y jitter and the pair sampling; same arguments, same bytes.
      image_size: side of the square images, at least 8 (the source digits are 8x8).
      min_pairs_per_x: fewest valid y per x, at least 1.
      max_pairs_per_x: most valid y per x; each x draws its count uniformly in between.
      max_rotation_degrees: the Y jitter: rotation drawn uniformly in +-this.
      max_shift_pixels: the Y jitter: shift drawn uniformly in +-this on each axis.
      overwrite: replace whatever `output_dir` holds when it was written with other parameters
        (or is not a digit-domains folder); otherwise that is an error.

    Returns:
      The folders, the pair-list path and the counts.

    Raises:
      ValueError: on arguments out of range.
      FileExistsError: when `output_dir` holds something else and `overwrite` is False.
    """
    if image_size < 8:
        raise ValueError(f"image_size must be at least 8 (the digits are 8x8), got {image_size}")
    if not 1 <= min_pairs_per_x <= max_pairs_per_x:
        raise ValueError(
            "need 1 <= min_pairs_per_x <= max_pairs_per_x, got "
            f"{min_pairs_per_x} and {max_pairs_per_x}"
        )
    if max_rotation_degrees < 0 or max_shift_pixels < 0:
        raise ValueError("max_rotation_degrees and max_shift_pixels must not be negative")

    parameters = {
        "format_version": FORMAT_VERSION,
        "seed": int(seed),
        "image_size": int(image_size),
        "min_pairs_per_x": int(min_pairs_per_x),
        "max_pairs_per_x": int(max_pairs_per_x),
        "max_rotation_degrees": float(max_rotation_degrees),
        "max_shift_pixels": int(max_shift_pixels),
    }
    domains_path = os.path.join(output_dir, DOMAINS_FILE)
    if os.path.exists(domains_path):
        with open(domains_path) as f:
            written = json.load(f)
        if written.get("parameters") == parameters:
            return _result(output_dir, written["counts"])
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        if not overwrite:
            raise FileExistsError(
                f"{output_dir} is not empty and was not written by write_digit_domains with "
                "these parameters; pass overwrite=True to replace it"
            )
        shutil.rmtree(output_dir)

    images, digits = _load_digits()
    rng = np.random.default_rng(seed)
    x_images = [_style_x(image, image_size) for image in images]
    y_images = [
        _style_y(image, image_size, rng, max_rotation_degrees, max_shift_pixels) for image in images
    ]
    ids = [f"{digit}/{index:04d}.png" for index, digit in enumerate(digits)]
    valid_pairs = _sample_valid_pairs(digits, rng, min_pairs_per_x, max_pairs_per_x)

    # Write everything beside the target and rename at the end, so an interrupted call never
    # leaves a folder that looks complete.
    parent = os.path.dirname(os.path.abspath(output_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".digit-domains-", dir=parent)
    try:
        for domain, domain_images in ((X_DIR, x_images), (Y_DIR, y_images)):
            for image_id, image in zip(ids, domain_images, strict=True):
                path = os.path.join(staging, domain, image_id)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(_png_bytes(image))
        order = np.argsort(ids, kind="stable")
        with open(os.path.join(staging, PAIRS_FILE), "w") as f:
            for x in order:
                y_ids = sorted(ids[y] for y in valid_pairs[x])
                f.write(json.dumps({"x": ids[x], "y": y_ids}) + "\n")
        counts = {
            "num_x": len(ids),
            "num_y": len(ids),
            "num_pairs": int(sum(len(p) for p in valid_pairs)),
        }
        with open(os.path.join(staging, DOMAINS_FILE), "w") as f:
            json.dump({"parameters": parameters, "counts": counts}, f, indent=2, sort_keys=True)
            f.write("\n")
        if os.path.isdir(output_dir):
            os.rmdir(output_dir)  # empty, checked above
        os.rename(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _result(output_dir, counts)


def _result(output_dir: str, counts: dict[str, int]) -> DigitDomains:
    return DigitDomains(
        x_dir=os.path.join(output_dir, X_DIR),
        y_dir=os.path.join(output_dir, Y_DIR),
        pairs_path=os.path.join(output_dir, PAIRS_FILE),
        num_x=counts["num_x"],
        num_y=counts["num_y"],
        num_pairs=counts["num_pairs"],
    )


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """Returns uint8 [N, 8, 8] images (0..255, strokes bright) and int64 [N] digit classes."""
    from sklearn.datasets import load_digits  # sklearn is slow to import; only here

    digits = load_digits()
    # The bundled pixels are counts 0..16 of a 4x4 block; 16 is a fully inked block.
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    return images, digits.target.astype(np.int64)


def _style_x(image: np.ndarray, image_size: int) -> Image.Image:
    return Image.fromarray(image, mode="L").resize((image_size, image_size), Image.BICUBIC)


def _style_y(
    image: np.ndarray,
    image_size: int,
    rng: np.random.Generator,
    max_rotation_degrees: float,
    max_shift_pixels: int,
) -> Image.Image:
    upscaled = _style_x(image, image_size)
    angle = float(rng.uniform(-max_rotation_degrees, max_rotation_degrees))
    shift = rng.integers(-max_shift_pixels, max_shift_pixels + 1, size=2)
    jittered = upscaled.rotate(
        angle, resample=Image.BILINEAR, translate=(int(shift[0]), int(shift[1])), fillcolor=0
    )
    # A 3x3 maximum widens every stroke by about one pixel on each side at 32x32.
    thick = jittered.filter(ImageFilter.MaxFilter(3))
    return Image.eval(thick, lambda value: 255 - value)


def _sample_valid_pairs(
    digits: np.ndarray, rng: np.random.Generator, min_pairs: int, max_pairs: int
) -> list[np.ndarray]:
    """For each x, a sorted array of distinct y of the same class, excluding its own copy."""
    members = {int(d): np.flatnonzero(digits == d) for d in np.unique(digits)}
    valid_pairs = []
    for x, digit in enumerate(digits):
        candidates = members[int(digit)]
        candidates = candidates[candidates != x]
        if candidates.size < min_pairs:
            raise ValueError(
                f"digit {digit} has {candidates.size} other images, fewer than "
                f"min_pairs_per_x={min_pairs}"
            )
        count = int(rng.integers(min_pairs, min(max_pairs, candidates.size) + 1))
        valid_pairs.append(np.sort(rng.choice(candidates, size=count, replace=False)))
    return valid_pairs


def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    # Fixed settings and no metadata: the bytes depend only on the pixels.
    image.save(buffer, format="PNG", optimize=False, compress_level=6)
    return buffer.getvalue()
