"""CLI: `python -m tfx_dynamic_inputs.materialize {pairs,audio} ... [Beam pipeline options]`.

Flags not listed here must be Beam pipeline options (`--runner`, `--direct_num_workers`,
`--direct_running_mode`, ...): they go to Beam's PipelineOptions, DirectRunner by default; any
other flag is an error (one line, status 2), as is a bad value or folder (found before Beam or
TensorFlow load): each value is checked against its bound in `config` (the one the Python API
and the TFX components check too). Prints a one-line summary; on a failed run prints the reason
and exits with status 1, without a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import sys
from typing import NoReturn

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


def _no_default(action: argparse.Action) -> bool:
    # By identity: 0 == False, and a default of 0 is worth saying.
    return action.default is None or action.default is False or action.default is argparse.SUPPRESS


class _HelpWithDefaults(argparse.HelpFormatter):
    """Help that states each flag's default, unless it has none or already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if _no_default(action) or "default" in text:
            return text
        return f"{text} (default: %(default)s)"


class _OneLineParser(argparse.ArgumentParser):
    """Reports a bad flag (`--num_shards nan`) in one line with status 2, without argparse's
    usage; its sub-command parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="python -m tfx_dynamic_inputs.materialize",
        description="Materialize raw data into indexed TFRecord shards (Apache Beam).",
        epilog="Other flags are Beam pipeline options, e.g. --direct_num_workers=2 "
        "--direct_running_mode=multi_processing.",
    )
    jobs = parser.add_subparsers(dest="job", required=True)

    pairs = jobs.add_parser(
        "pairs",
        formatter_class=_HelpWithDefaults,
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
        action="store_true",
        help="no groups files: each image's group is the first folder of its id "
        "(x_dir/cat/001.png pairs with y_dir/cat/017.png)",
    )
    pairs.add_argument("--image_storage", default="encoded", choices=IMAGE_STORAGE_MODES)
    pairs.add_argument("--raw_height", type=int, default=256)
    pairs.add_argument("--raw_width", type=int, default=256)
    pairs.add_argument(
        "--raw_channels", type=int, default=3, metavar="{" + ",".join(map(str, RAW_CHANNELS)) + "}"
    )
    pairs.add_argument(
        "--max_image_pixels",
        type=int,
        default=MAX_IMAGE_PIXELS,
        help="an image whose header declares more pixels (width x height) is an image_too_large "
        f"reject; also bounds --raw_height x --raw_width (default {MAX_IMAGE_PIXELS})",
    )
    pairs.add_argument("--files_per_batch", type=int, default=256)

    speech = jobs.add_parser(
        "audio",
        formatter_class=_HelpWithDefaults,
        help="labelled utterances in a manifest or speaker folders",
    )
    speech.add_argument("--manifest", help="CSV (header) or JSON Lines: path, speaker[, split]")
    speech.add_argument(
        "--speaker_from_path",
        action="store_true",
        help="no manifest: every audio file under --root, its speaker the first folder of its "
        "path (id10001/<video>/00001.wav)",
    )
    speech.add_argument("--root", required=True, help="folder the audio paths are under")
    speech.add_argument("--manifest_format", default="auto", choices=MANIFEST_FORMATS)
    speech.add_argument("--sample_rate", type=int, default=AudioConfig.sample_rate)
    speech.add_argument("--split_mode", default="speaker", choices=SPLIT_MODES)
    speech.add_argument("--eval_fraction", type=float, default=0.1)
    speech.add_argument("--split_seed", type=int, default=0)
    speech.add_argument(
        "--max_audio_seconds",
        type=float,
        default=MAX_AUDIO_SECONDS,
        help=f"longer audio is a too_long reject (default {MAX_AUDIO_SECONDS:g})",
    )
    speech.add_argument(
        "--min_input_sample_rate",
        type=int,
        default=MIN_INPUT_SAMPLE_RATE,
        help="a file whose own rate is below it is an implausible_rate reject "
        f"(default {MIN_INPUT_SAMPLE_RATE})",
    )
    speech.add_argument(
        "--max_input_sample_rate",
        type=int,
        default=MAX_INPUT_SAMPLE_RATE,
        help=f"... or above it (default {MAX_INPUT_SAMPLE_RATE})",
    )
    speech.add_argument(
        "--files_per_batch",
        type=int,
        default=16,
        help="files per Beam element, decoded by 2 threads (default 16)",
    )

    for job in (pairs, speech):
        job.add_argument("--output_dir", required=True)
        job.add_argument("--max_shard_bytes", type=int, default=128 << 20)
        job.add_argument("--num_shards", type=int, default=0, help="0: from --max_shard_bytes")
        job.add_argument("--max_reject_fraction", type=float, default=0.1)
        job.add_argument("--overwrite", action="store_true", help="replace a previous run")
        # No argparse `choices`: the config names a bad value in one line (argparse adds its
        # usage).
        job.add_argument(
            "--spill",
            default="auto",
            metavar="{" + ",".join(SPILL_MODES) + "}",
            help="how decoded payloads reach the shard writers: files every worker reads "
            "(below --temp_location when given, else the output dir), or none: through the "
            "runner's shuffle (Dataflow, Flink, Spark); auto: files on the DirectRunner only",
        )
    for job in (pairs, speech):
        for action in job._actions:
            if action.help is None and not _no_default(action):
                action.help = "default: %(default)s"  # a flag without help still shows it
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


def _did_you_mean(argument: str, job: str) -> str:
    """ "; did you mean '--flag'?" for the closest flag of `job` to `argument`, or ""."""
    [subparsers] = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    flags = [
        option
        for action in subparsers.choices[job]._actions
        for option in action.option_strings
        if option.startswith("--")
    ]
    close = difflib.get_close_matches(argument.split("=")[0], flags, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


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
    args, beam_args = _parser().parse_known_args(argv)
    config_class, module, job = _JOBS[args.job]
    try:
        config = from_flat(config_class, {**vars(args), "beam_pipeline_args": tuple(beam_args)})
        # What needs neither Beam nor TensorFlow first: a bad folder is one line at once.
        config.validate()
        preflight.check_output_dir(config.output_dir, config.overwrite, config.input_dirs())
        preflight.check_holds_inputs(config.input_dirs(), config.input_files())
    except MaterializeError as error:
        print(f"materialize {args.job}: error: {error}", file=sys.stderr)
        return 2
    unknown = _not_beam_options(beam_args)
    if unknown:
        print(
            f"materialize {args.job}: error: unrecognized argument {unknown[0]!r}: neither a "
            f"flag of `{args.job}` (see --help) nor a Beam pipeline option"
            f"{_did_you_mean(unknown[0], args.job)}",
            file=sys.stderr,
        )
        return 2
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
