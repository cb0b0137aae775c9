"""`make kubeflow`: compiles both pipelines to KFP v2 JSON with KubeflowV2DagRunner.

    python -m kubeflow.runner [--image IMAGE] [--pipeline-root gs://...] [--output-dir kubeflow]
                              [--data-root /app/sample_data] [--beam-arg=--runner=DataflowRunner]

Writes `<output-dir>/<pipeline name>.json` (a `PipelineJob` whose `pipelineSpec` every task of
which runs `python -m tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor` in
`--image`). Paths in the spec are read inside the pods: by default the bundled sample data at
the image's `/app/sample_data` (the Dockerfile generates the digit domains there) and a
`gs://` pipeline root to replace with yours. Input fingerprints are not computed at compile
time (the data need not be reachable from here); the cluster's own caching keys on parameters.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from tfx import v1 as tfx
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

from pipeline import config, cyclegan_pipeline, speaker_pipeline
from pipeline.sample_data import PAIRS_FILE, X_DIR, Y_DIR

DIGITS_DIR = "digits"
SPEAKERS_DIR = "speakers"


def compile_pipeline(
    pipeline: tfx.dsl.Pipeline, output_dir: str, image: str, filename: str | None = None
) -> str:
    """Compiles `pipeline` to `<output_dir>/<filename or pipeline name>.json`; returns the path."""
    filename = filename or f"{pipeline.pipeline_info.pipeline_name}.json"
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image=image),
        output_dir=output_dir,
        output_filename=filename,
    )
    path = os.path.join(output_dir, filename)
    if os.path.exists(path):
        # The runner refuses to overwrite; a re-compile replaces the spec.
        os.remove(path)
    runner.run(pipeline)
    return path


def pipeline_configs(
    data_root: str, schemas: str, **overrides
) -> tuple[config.CycleGanConfig, config.SpeakerConfig]:
    """The two pipelines' configs over sample data laid out under `data_root` as in the image.

    `overrides["cyclegan"]` / `overrides["speaker"]` replace fields of that config.
    """
    digits = os.path.join(data_root, DIGITS_DIR)
    speakers = os.path.join(data_root, SPEAKERS_DIR)
    cyclegan = config.CycleGanConfig(
        x_dir=os.path.join(digits, X_DIR),
        y_dir=os.path.join(digits, Y_DIR),
        pairs=os.path.join(digits, PAIRS_FILE),
        schema_file=os.path.join(schemas, config.IMAGE_SCHEMA),
        **overrides.get("cyclegan", {}),
    )
    speaker = config.SpeakerConfig(
        manifest=os.path.join(speakers, os.path.basename(config.SPEAKER_MANIFEST)),
        root=speakers,
        schema_file=os.path.join(schemas, config.AUDIO_SCHEMA),
        **overrides.get("speaker", {}),
    )
    return cyclegan, speaker


def compile_all(
    kubeflow_config: config.KubeflowConfig,
    cyclegan: config.CycleGanConfig,
    speaker: config.SpeakerConfig,
) -> list[str]:
    """Compiles both pipelines into `kubeflow_config.output_dir`; returns the spec paths."""
    run = config.RunConfig(
        pipeline_root=kubeflow_config.pipeline_root,
        metadata_path=None,
        beam_pipeline_args=kubeflow_config.beam_pipeline_args,
        fingerprint_inputs=False,
    )
    return [
        compile_pipeline(
            module.create_pipeline(pipeline_config, run),
            kubeflow_config.output_dir,
            kubeflow_config.image,
        )
        for module, pipeline_config in (
            (cyclegan_pipeline, cyclegan),
            (speaker_pipeline, speaker),
        )
    ]


def main(argv: list[str] | None = None) -> None:
    defaults = config.KubeflowConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default=defaults.image)
    parser.add_argument("--pipeline-root", default=defaults.pipeline_root)
    parser.add_argument("--output-dir", default=defaults.output_dir)
    parser.add_argument(
        "--data-root",
        default=os.path.join(defaults.image_repo_root, "sample_data"),
        help=f"folder holding {DIGITS_DIR}/ and {SPEAKERS_DIR}/ as seen from the pods",
    )
    parser.add_argument(
        "--schemas-dir",
        default=os.path.join(defaults.image_repo_root, os.path.basename(config.SCHEMAS_DIR)),
        help="folder holding the record schemas as seen from the pods",
    )
    parser.add_argument(
        "--beam-arg",
        action="append",
        default=[],
        help="a Beam pipeline argument for every Beam component (repeat)",
    )
    args = parser.parse_args(argv)
    kubeflow_config = dataclasses.replace(
        defaults,
        image=args.image,
        pipeline_root=args.pipeline_root,
        output_dir=args.output_dir,
        beam_pipeline_args=tuple(args.beam_arg),
    )
    cyclegan, speaker = pipeline_configs(args.data_root, args.schemas_dir)
    for path in compile_all(kubeflow_config, cyclegan, speaker):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
