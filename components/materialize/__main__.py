"""CLI: `python -m tfx_dynamic_inputs.materialize {pairs,audio} ... [Beam pipeline options]`.

Flags follow the package's grammar (`cli_flags`): `--output_dir` or `--output-dir`, booleans as
`--overwrite`, `--no-overwrite` or `--overwrite true|false`, `--verbose` to see the libraries'
notices. Flags not listed here must be Beam pipeline options (`--runner`,
`--direct_num_workers`, `--direct_running_mode`, ...): they go to Beam's PipelineOptions,
DirectRunner by default; any other flag is an error (one line naming the closest flag, status 2),
as is a bad value or folder (found before Beam or TensorFlow load): each value is checked
against its bound in `config` (the one the Python API and the TFX components check too). Prints
a one-line summary; on a failed run prints the reason and exits with status 1, without a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from tfx_dynamic_inputs.cli_flags import (
    EXIT_BAD_FLAGS,
    BoolFlag,
    FlagError,
    FlagParser,
    parse_float,
    parse_int,
    quiet,
)
from tfx_dynamic_inputs.interrupts import EXIT_INTERRUPTED, watching_interrupts
from tfx_dynamic_inputs.materialize import preflight
from tfx_dynamic_inputs.materialize.config import (
    GROUPS_FORMATS,
    IMAGE_STORAGE_MODES,
    MANIFEST_FORMATS,
    MAX_AUDIO_SECONDS,
    MAX_IMAGE_PIXELS,
    MAX_INPUT_SAMPLE_RATE,
    MIN_INPUT_SAMPLE_RATE,
    PAIRS_FORMATS,
    RAW_CHANNELS,
    SPILL_MODES,
    SPLIT_MODES,
    AudioConfig,
    PairsConfig,
    from_flat,
)
from tfx_dynamic_inputs.materialize.errors import MaterializeError

# Each sub-command's config class and the module of its job (imported once the flags are
# checked: Beam and TensorFlow take seconds to load); the flags are named after the fields.
_JOBS = {
    "pairs": (PairsConfig, "tfx_dynamic_inputs.materialize.pairs_pipeline", "run_pairs"),
    "audio": (AudioConfig, "tfx_dynamic_inputs.materialize.audio_pipeline", "run_audio"),
}


def _parser() -> FlagParser:
    parser = FlagParser(
        prog="python -m tfx_dynamic_inputs.materialize",
        description="Materialize raw data into indexed TFRecord shards (Apache Beam).",
        epilog="Other flags are Beam pipeline options, e.g. --direct_num_workers=2 "
        "--direct_running_mode=multi_processing.",
    )
    jobs = parser.add_subparsers(dest="job", required=True)

    pairs = jobs.add_parser(
        "pairs",
        help="image domains X, Y and their valid-pair list, or the group of each image",
    )
    pairs.add_argument("--x_dir", required=True, help="folder of X images; ids = relative paths")
    pairs.add_argument("--y_dir", required=True, help="folder of Y images")
    pairs.add_argument("--pairs", help='JSON Lines {"x":..,"y":[..]} or CSV x,y')
    pairs.add_argument("--pairs_format", default="auto", choices=PAIRS_FORMATS)
    # Instead of --pairs: x pairs with every y of its group.
    pairs.add_argument("--x_groups", help='group of each x: JSON Lines {"id":..,"group":..} or CSV')
    pairs.add_argument("--y_groups", help="group of each y, as --x_groups")
    pairs.add_argument("--groups_format", default="auto", choices=GROUPS_FORMATS)
    pairs.add_argument(
        "--groups_from_subfolder",
        action=BoolFlag,
        help="no groups files: each image's group is the first folder of its id "
        "(x_dir/cat/001.png pairs with y_dir/cat/017.png)",
    )
    pairs.add_argument("--image_storage", default="encoded", choices=IMAGE_STORAGE_MODES)
    pairs.add_argument("--raw_height", type=parse_int, default=256)
    pairs.add_argument("--raw_width", type=parse_int, default=256)
    pairs.add_argument(
        "--raw_channels",
        type=parse_int,
        default=3,
        metavar="{" + ",".join(map(str, RAW_CHANNELS)) + "}",
    )
    pairs.add_argument(
        "--max_image_pixels",
        type=parse_int,
        default=MAX_IMAGE_PIXELS,
        help="an image whose header declares more pixels (width x height) is an image_too_large "
        f"reject; also bounds --raw_height x --raw_width (default {MAX_IMAGE_PIXELS})",
    )
    pairs.add_argument("--files_per_batch", type=parse_int, default=256)

    speech = jobs.add_parser(
        "audio",
        help="labelled utterances in a manifest or speaker folders",
    )
    speech.add_argument("--manifest", help="CSV (header) or JSON Lines: path, speaker[, split]")
    speech.add_argument(
        "--speaker_from_path",
        action=BoolFlag,
        help="no manifest: every audio file under --root, its speaker the first folder of its "
        "path (id10001/<video>/00001.wav)",
    )
    speech.add_argument("--root", required=True, help="folder the audio paths are under")
    speech.add_argument("--manifest_format", default="auto", choices=MANIFEST_FORMATS)
    speech.add_argument("--sample_rate", type=parse_int, default=AudioConfig.sample_rate)
    speech.add_argument("--split_mode", default="speaker", choices=SPLIT_MODES)
    speech.add_argument("--eval_fraction", type=parse_float, default=0.1)
    speech.add_argument("--split_seed", type=parse_int, default=0)
    speech.add_argument(
        "--max_audio_seconds",
        type=parse_float,
        default=MAX_AUDIO_SECONDS,
        help=f"longer audio is a too_long reject (default {MAX_AUDIO_SECONDS:g})",
    )
    speech.add_argument(
        "--min_input_sample_rate",
        type=parse_int,
        default=MIN_INPUT_SAMPLE_RATE,
        help="a file whose own rate is below it is an implausible_rate reject "
        f"(default {MIN_INPUT_SAMPLE_RATE})",
    )
    speech.add_argument(
        "--max_input_sample_rate",
        type=parse_int,
        default=MAX_INPUT_SAMPLE_RATE,
        help=f"... or above it (default {MAX_INPUT_SAMPLE_RATE})",
    )
    speech.add_argument(
        "--files_per_batch",
        type=parse_int,
        default=16,
        help="files per Beam element, decoded by 2 threads (default 16)",
    )

    for job in (pairs, speech):
        job.add_argument("--output_dir", required=True)
        job.add_argument("--max_shard_bytes", type=parse_int, default=128 << 20)
        job.add_argument(
            "--num_shards", type=parse_int, default=0, help="0: from --max_shard_bytes"
        )
        job.add_argument("--max_reject_fraction", type=parse_float, default=0.1)
        job.add_argument("--overwrite", action=BoolFlag, help="replace a previous run")
        # No argparse `choices`: the config checks the value, as the Python API's.
        job.add_argument(
            "--spill",
            default="auto",
            metavar="{" + ",".join(SPILL_MODES) + "}",
            help="how decoded payloads reach the shard writers: files every worker reads "
            "(below --temp_location when given, else the output dir), or none: through the "
            "runner's shuffle (Dataflow, Flink, Spark); auto: files on the DirectRunner only",
        )
        job.add_verbose_flag()
    return parser


def _one_line(summary: dict) -> str:
    sets = ", ".join(
        f"{name}={stats['num_records']}"
        + (f"/{stats['num_classes']} classes" if "num_classes" in stats else "")
        + f" ({stats['num_shards']} shards)"
        for name, stats in summary["record_sets"].items()
    )
    pairs = summary.get("pairs")
    pair_text = ""
    if pairs and pairs.get("num_pairs"):
        degree = pairs["degree"]
        groups = f" in {pairs['num_groups']} groups" if pairs.get("by_group") else ""
        pair_text = (
            f"; {pairs['num_pairs']} valid pairs{groups} (degree {degree['min']}-{degree['max']}, "
            f"mean {degree['mean']})"
        )
    reasons = ", ".join(f"{k}={v}" for k, v in summary["rejects"]["by_reason"].items())
    return (
        f"materialize {summary['job']}: {sets}{pair_text}; "
        f"{summary['rejects']['total']} rejects{f' ({reasons})' if reasons else ''}"
    )


def _not_beam_options(args: list[str]) -> list[str]:
    """The arguments in `args` that no Beam pipeline option takes, as Beam's own parser (built
    from every `PipelineOptions` subclass, and handed to `add_extra_args_fn`) sees them."""
    from apache_beam.options import pipeline_options

    unknown: list[str] = []

    def collect(parser: argparse.ArgumentParser) -> None:
        unknown.extend(parser.parse_known_args(args)[1])

    # Beam logs the arguments it discards: a second line beside the CLI's own error.
    beam_log = logging.getLogger(pipeline_options.__name__)
    level = beam_log.level
    beam_log.setLevel(logging.ERROR)
    try:
        pipeline_options.PipelineOptions(args).get_all_options(add_extra_args_fn=collect)
    finally:
        beam_log.setLevel(level)
    return unknown


def main(argv: list[str] | None = None) -> int:
    """The `python -m tfx_dynamic_inputs.materialize {pairs,audio}` command line.

    Args:
        argv: the arguments (without the program name); None reads `sys.argv`. Flags that are
            not the job's are passed to Beam as pipeline options.

    Returns:
        The exit status: 0 on success, 1 on a failed run, 2 for an unknown argument, a bad
        value or a bad folder, 130 when interrupted.

    Example:
        main(["pairs", "--x_dir", "x", "--y_dir", "y", "--pairs", "p.jsonl", "--output_dir", "out"])
    """
    parser = _parser()
    try:
        args, beam_args = parser.parse_known_args(argv)
    except FlagError as error:
        print(f"materialize: error: {error}", file=sys.stderr)
        return EXIT_BAD_FLAGS
    config_class, module, job = _JOBS[args.job]
    try:
        config = from_flat(config_class, {**vars(args), "beam_pipeline_args": tuple(beam_args)})
        # What needs neither Beam nor TensorFlow first: a bad folder is one line at once.
        config.validate()
        preflight.check_output_dir(config.output_dir, config.overwrite, config.input_dirs())
        preflight.check_holds_inputs(config.input_dirs(), config.input_files())
    except MaterializeError as error:
        print(f"materialize {args.job}: error: {error}", file=sys.stderr)
        return EXIT_BAD_FLAGS
    quiet(args.verbose)  # before Beam's import
    unknown = _not_beam_options(beam_args)
    if unknown:
        print(
            f"materialize {args.job}: error: {parser.unknown_argument(unknown[0], args)}: "
            f"neither a flag of `{args.job}` (see --help) nor a Beam pipeline option",
            file=sys.stderr,
        )
        return EXIT_BAD_FLAGS
    run = getattr(importlib.import_module(module), job)
    with watching_interrupts() as interrupted:
        try:
            summary = run(config)
        except KeyboardInterrupt:
            # run_job has cancelled the Beam job and cleaned up (or said what it left) already.
            print(_interrupted_line(args.job, args.output_dir), file=sys.stderr)
            return EXIT_INTERRUPTED
        except Exception as error:
            if interrupted.is_set():
                # A DirectRunner worker got the interrupt and Beam re-raised it as its own error.
                print(_interrupted_line(args.job, args.output_dir), file=sys.stderr)
                return EXIT_INTERRUPTED
            if isinstance(error, MaterializeError):
                print(f"materialize {args.job}: error: {error}", file=sys.stderr)
                return 1
            raise
    if interrupted.is_set():
        # The interrupt came as the run was committed: it is complete, but say it stopped.
        print(
            f"materialize {args.job}: interrupted after the run was written: "
            f"{_one_line(summary)} -> {args.output_dir}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print(f"{_one_line(summary)} -> {args.output_dir}")
    return 0


def _interrupted_line(job: str, output_dir: str) -> str:
    return (
        f"materialize {job}: interrupted; nothing of this run is served ({output_dir} is "
        "marked failed or left as it was): run the same command with --overwrite to start again"
    )


if __name__ == "__main__":
    sys.exit(main())
