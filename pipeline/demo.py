"""`make demo`: both pipelines end to end on the bundled sample data, then what they produced.

    python -m pipeline.demo [--work-dir out/demo] [--no-cache]

Runs the CycleGAN pipeline (digit domains X/Y with a class-constrained valid-pair list) and the
speaker pipeline (the committed espeak-ng corpus) on LocalDagRunner with sqlite ML Metadata and
the Beam DirectRunner, then prints where each artifact is, the CycleGAN losses and the pair
coverage reached, and the speaker model's equal error rate on held-out speakers. A second run
with unchanged inputs is served from the ML Metadata cache (`--no-cache` re-executes).
"""

from __future__ import annotations

import argparse
import os
import time

from components import component_keys as keys
from pipeline import config, cyclegan_pipeline, run_local, speaker_pipeline

TRAINER = "ResampledTrainer"


def _print_artifacts(title: str, results: dict[str, run_local.NodeResult]) -> None:
    print(f"\n== {title}")
    for node_id, result in results.items():
        print(f"  {node_id} [{result.state.lower()}]")
        for key, artifacts in sorted(result.outputs.items()):
            for artifact in artifacts:
                print(f"    {key:<13} {artifact.uri}")


def _metrics(results: dict[str, run_local.NodeResult]) -> dict:
    [model_run] = results[TRAINER].outputs[keys.MODEL_RUN_KEY]
    return model_run.properties


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work-dir", default=os.path.join(config.REPO_ROOT, "out", "demo"))
    parser.add_argument("--no-cache", action="store_true", help="re-execute every component")
    args = parser.parse_args(argv)
    started = time.monotonic()
    run_settings = run_local.run_config(args.work_dir, enable_cache=not args.no_cache)
    cyclegan = run_local.cyclegan_config(os.path.join(args.work_dir, run_local.DIGITS_DIR))
    speaker = config.SpeakerConfig()

    timings = {}
    for name, module, pipeline_config in (
        ("CycleGAN", cyclegan_pipeline, cyclegan),
        ("speaker", speaker_pipeline, speaker),
    ):
        print(f"running the {name} pipeline ({pipeline_config.pipeline_name}) ...", flush=True)
        begin = time.monotonic()
        run_local.run(module.create_pipeline(pipeline_config, run_settings))
        timings[name] = time.monotonic() - begin

    cyclegan_results = run_local.latest_run(run_settings.metadata_path, cyclegan.pipeline_name)
    speaker_results = run_local.latest_run(run_settings.metadata_path, speaker.pipeline_name)
    _print_artifacts(f"CycleGAN pipeline artifacts ({timings['CycleGAN']:.0f} s)", cyclegan_results)
    _print_artifacts(f"speaker pipeline artifacts ({timings['speaker']:.0f} s)", speaker_results)

    gan = _metrics(cyclegan_results)
    print(
        f"\n== CycleGAN ({cyclegan.num_epochs} epochs on dynamic pairs, "
        f"batch {cyclegan.batch_size})"
    )
    print(
        f"  cycle loss         {gan['cycle_loss_first_epoch']:.4f} (epoch 1) -> "
        f"{gan['cycle_loss_last_epoch']:.4f} (epoch {int(gan['epochs'])})"
    )
    for name in ("identity_loss", "generator_adv_loss", "discriminator_loss"):
        print(f"  {name:<18} {gan[name]:.4f} (last epoch)")
    print(
        f"  pair coverage      {gan['pair_coverage_epoch']:.1%} of the valid pairs in the last "
        f"epoch, {gan['pair_coverage_total']:.1%} over all epochs; invalid pairs served: "
        f"{int(gan['invalid_pairs'])}"
    )

    eer = _metrics(speaker_results)
    print(
        f"\n== speaker embedding ({speaker.num_epochs} epochs, batches of "
        f"{speaker.n_classes_per_batch} speakers x {speaker.n_samples_per_class} utterances)"
    )
    print(
        f"  EER on {int(eer['num_speakers'])} held-out speakers ({int(eer['num_utterances'])} "
        f"utterances): {eer['eer']:.1%} (untrained network: {eer['eer_before_training']:.1%}, "
        f"chance: {eer['eer_chance']:.0%})"
    )
    states = {r.state for r in (*cyclegan_results.values(), *speaker_results.values())}
    if states == {"CACHED"}:
        print(
            "\n(inputs unchanged: every component was served from the ML Metadata cache; "
            "--no-cache re-executes them)"
        )
    print(f"\nML Metadata: {run_settings.metadata_path}")
    print(f"demo wall time: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
