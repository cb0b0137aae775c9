"""TensorBoard pictures of a finished materialize run, and where to find all the pictures.

`write_run_pictures(output_dir, summary)` writes one event file under
`<output_dir>/tensorboard/` (step 0): for each tag below, a histogram (`tf.summary.histogram`)
under the tag and a bar chart image under `<tag>_chart`; the same chart goes beside the event
file as a PNG file, `charts.png_name(<tag>)` (`pairs_degree.png`, say), for people without
TensorBoard:

- pairs job: `pairs/degree`, the number of valid y of each x record. Read from the pair index
  (`index/pairs/row_splits.npy`, or the groups of a group index), since `summary.json` keeps
  only statistics of the degrees: call it before the materialize component moves the index
  away.
- audio job: `utterances_per_speaker/<record set>`, the number of utterances of each speaker of
  each labelled record set, from the summary's `class_counts`.

TensorFlow is imported only inside the function: the job's modules may import this one, and a
Beam worker must not import TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import numpy as np

from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.models import charts

PICTURES_DIR = "tensorboard"
CHART_SUFFIX = "_chart"


class _Picture(NamedTuple):
    tag: str
    values: np.ndarray  # int64 [N], one per x record or speaker
    edges: np.ndarray  # int64 [n + 1], see `charts.integer_bins`
    counts: np.ndarray  # int64 [n]
    x_title: str
    y_title: str
    description: str


def run_pictures_dir(output_dir: str) -> str:
    """Where `write_run_pictures` writes the pictures of the run in `output_dir`.

    Args:
        output_dir: the run folder.

    Returns:
        `<output_dir>/pictures`.
    """
    return os.path.join(output_dir, PICTURES_DIR)


def data_files(output_dir: str) -> Iterator[tuple[str, str]]:
    """(path relative to the run, path) of every file of a local run but its pictures: what
    re-runs of the same input reproduce byte for byte (event files carry their wall time).

    Args:
        output_dir: a local run folder.

    Returns:
        An iterator of `(relative path, path)`, sorted within each folder.
    """
    for directory, subdirectories, names in os.walk(output_dir):
        if directory == output_dir and PICTURES_DIR in subdirectories:
            subdirectories.remove(PICTURES_DIR)
        for name in sorted(names):
            path = os.path.join(directory, name)
            yield os.path.relpath(path, output_dir), path


def write_run_pictures(output_dir: str, summary: dict) -> str:
    """Writes the histogram pictures of a successful run; returns their log dir.

    Args:
      output_dir: the run's output directory (where `summary.json` is).
      summary: the run's summary (the content of `summary.json`).

    Returns:
      `run_pictures_dir(output_dir)`, emptied first, so a rerun's pictures replace the last.

    Raises:
      ValueError: the run failed, is of an unknown job, or its pair index does not match the
        summary.
    """
    import tensorflow as tf

    if not summary.get("ok"):
        raise ValueError(f"no pictures of a failed run: {summary.get('error')}")
    job = summary.get("job")
    if job == "pairs":
        pictures = [_degree_picture(output_dir, summary)]
    elif job == "audio":
        pictures = [
            _utterances_picture(record_set, stats["class_counts"])
            for record_set, stats in sorted(summary["record_sets"].items())
            if "class_counts" in stats
        ]
    else:
        raise ValueError(f"no pictures for job {job!r}: expected 'pairs' or 'audio'")

    log_dir = run_pictures_dir(output_dir)
    if tf.io.gfile.exists(log_dir):
        tf.io.gfile.rmtree(log_dir)
    writer = tf.summary.create_file_writer(log_dir)
    with writer.as_default(step=0):
        for picture in pictures:
            counts, edges = picture.counts, picture.edges
            tf.summary.histogram(
                picture.tag, picture.values, buckets=len(counts), description=picture.description
            )
            chart = charts.histogram_chart(
                [counts],
                [charts.BLUE],
                x_labels=(str(edges[0]), str(edges[-2])),  # the first value of each bar
                y_label=str(int(counts.max())),
                y_max=float(counts.max()),
                x_title=picture.x_title,
                y_title=picture.y_title,
            )
            # A tag holds one kind of summary in TensorBoard: the image gets its own.
            tf.summary.image(
                picture.tag + CHART_SUFFIX, chart[np.newaxis], description=picture.description
            )
            charts.write_png(chart, os.path.join(log_dir, charts.png_name(picture.tag)))
    writer.close()
    return log_dir


def tensorboard_hint(log_dirs: Mapping[str, str]) -> str:
    """Lines that say how to look at the pictures: one `tensorboard --logdir` command per
    named log dir, one command showing them all at once, and a last line saying that the
    charts are PNG files in those folders too (for people without TensorBoard).

    Args:
      log_dirs: name -> log dir, in the order to list them. Names must not hold ',' or ':'
        (TensorBoard's `--logdir_spec` separators).

    Returns:
      The lines, joined by newlines.

    Raises:
      ValueError: a name is empty or holds ',' or ':'.
    """
    bad = [name for name in log_dirs if not name or set(name) & {",", ":"}]
    if bad:
        raise ValueError(f"log dir names must be non-empty, without ',' or ':', got {bad}")
    width = max(map(len, log_dirs))
    lines = ["TensorBoard pictures (losses, translations, DET curves, histograms):"]
    lines += [f"  {name:<{width}}  tensorboard --logdir {path}" for name, path in log_dirs.items()]
    spec = ",".join(f"{name}:{path}" for name, path in log_dirs.items())
    lines.append(f"  {'all':<{width}}  tensorboard --logdir_spec {spec}")
    lines.append("PNG files of the charts (DET curves, histograms): *.png in the folders above")
    return "\n".join(lines)


def _degree_picture(output_dir: str, summary: dict) -> _Picture:
    if layout.has_group_index(output_dir):
        # Its edge CSR is not written past `layout.MAX_GROUP_EDGES` pairs; the groups always are.
        names, x_groups, y_groups = layout.load_group_index(output_dir)
        degrees = layout.group_degrees(x_groups, y_groups, len(names))
    else:
        degrees = np.diff(layout.load_csr(layout.pairs_index_dir(output_dir))[0])
    num_x = summary["record_sets"][layout.X_RECORD_SET]["num_records"]
    num_pairs = summary["pairs"]["num_pairs"]
    if len(degrees) != num_x or int(degrees.sum()) != num_pairs:
        raise ValueError(
            f"the pair index in {output_dir} holds {len(degrees)} x records and "
            f"{int(degrees.sum())} pairs, the summary {num_x} and {num_pairs}: not this run's"
        )
    edges, counts = charts.integer_bins(degrees)
    description = (
        f"Valid pairs per x record: bars count the x records (y axis, 0 to {counts.max()}) "
        f"by their number of valid y (x axis, {edges[0]} to {edges[-1] - 1}, "
        f"{edges[1] - edges[0]} per bar); {num_x} x records, {num_pairs} valid pairs."
    )
    return _Picture(
        "pairs/degree", degrees, edges, counts, "valid y per x record", "x records", description
    )


def _utterances_picture(record_set: str, class_counts: Mapping[str, int]) -> _Picture:
    per_speaker = np.fromiter(class_counts.values(), np.int64, len(class_counts))
    edges, counts = charts.integer_bins(per_speaker)
    description = (
        f"Utterances per speaker in record set {record_set!r}: bars count the speakers (y axis, "
        f"0 to {counts.max()}) by their number of utterances (x axis, {edges[0]} to "
        f"{edges[-1] - 1}, {edges[1] - edges[0]} per bar); {len(per_speaker)} speakers, "
        f"{per_speaker.sum()} utterances."
    )
    return _Picture(
        f"utterances_per_speaker/{record_set}",
        per_speaker,
        edges,
        counts,
        "utterances per speaker",
        "speakers",
        description,
    )
