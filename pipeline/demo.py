"""`make demo`: both pipelines end to end on the bundled sample data, then what they produced.

    tfx-dynamic-inputs demo [--work-dir tfx-dynamic-inputs-out/demo] [--no-cache]
    python -m tfx_dynamic_inputs.pipeline.demo  # the same

Runs the CycleGAN pipeline (digit domains X/Y with a class-constrained valid-pair list) and the
speaker pipeline (the committed espeak-ng corpus) on LocalDagRunner with sqlite ML Metadata and
the Beam DirectRunner, under `--work-dir` (by default below the current folder; the speaker
corpus ships in the installed package, the digits are generated there), then prints for each
where every artifact is, the inputs the Beam stage rejected, and the metrics: the CycleGAN
losses and the pair coverage reached, the speaker model's equal error rate on held-out speakers;
whether the model gate blessed each model (its held-out metric against the latest blessed
model's) and where Pusher pushed it; and where TensorBoard shows the pictures (translations, DET
curves, score and degree histograms).

A second run with unchanged inputs is served from the ML Metadata cache up to the trainers
(`--no-cache` re-executes). Its gates run again all the same: their baseline input is now the
model the first run blessed, which is the cached trainer's own model, so they bless it again and
Pusher pushes it as a new version; a third run is served from the cache throughout. A failed run
ends the demo with `error: <the component's error>` and exit status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tfx_dynamic_inputs import component_keys as keys
from tfx_dynamic_inputs.pipeline import config

DEFAULT_WORK_DIR = os.path.join(config.OUTPUT_DIR, "demo")


def main(argv: list[str] | None = None) -> int:
    """Runs the CycleGAN and speaker pipelines on the bundled data and reports both.

    Args:
        argv: the arguments (`--work-dir`, `--no-cache`); None reads `sys.argv`.

    Returns:
        The exit status: 0 when both pipelines succeeded.

    Example:
        main(["--work-dir", "/tmp/demo", "--no-cache"])
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--work-dir",
        default=DEFAULT_WORK_DIR,
        help=f"where both pipelines write (default: {DEFAULT_WORK_DIR}, below the current folder)",
    )
    parser.add_argument("--no-cache", action="store_true", help="re-execute every component")
    args = parser.parse_args(argv)
    # TFX and Beam once the flags are read (`--help` and a bad flag answer without them).
    from tfx_dynamic_inputs.materialize import pictures
    from tfx_dynamic_inputs.pipeline import cyclegan_pipeline, report, run_local, speaker_pipeline

    started = time.monotonic()
    run_settings = run_local.run_config(args.work_dir, enable_cache=not args.no_cache)
    cyclegan = run_local.cyclegan_config(os.path.join(args.work_dir, run_local.DIGITS_DIR))
    speaker = config.SpeakerConfig()

    trainer_states = set()
    log_dirs: dict[str, str] = {}
    for name, module, pipeline_config in (
        ("CycleGAN", cyclegan_pipeline, cyclegan),
        ("speaker", speaker_pipeline, speaker),
    ):
        print(f"running the {name} pipeline ({pipeline_config.pipeline_name}) ...", flush=True)
        begin = time.monotonic()
        outcome = run_local.execute(
            module.create_pipeline(pipeline_config, run_settings), run_settings.metadata_path
        )
        title = f"{name} pipeline ({time.monotonic() - begin:.0f} s)"
        print(
            f"\n{report.describe(title, pipeline_config, outcome.node_ids, outcome.results)}\n",
            flush=True,  # before an error line on stderr
        )
        if outcome.error is not None:
            print(f"error: {outcome.error}", file=sys.stderr)
            return 1
        for result in outcome.results.values():
            if keys.MODEL_RUN_KEY in result.outputs:
                trainer_states.add(report.state(result))
        log_dirs.update(report.log_dirs(name.lower(), outcome.results))

    if trainer_states == {"cached"}:
        print(
            "(inputs unchanged: the components up to the trainers were served from the ML "
            "Metadata cache; --no-cache re-executes them)"
        )
    print(pictures.tensorboard_hint(log_dirs))
    print(f"ML Metadata: {run_settings.metadata_path}")
    print(f"demo wall time: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
