"""A Beam worker of either job must not import TensorFlow (nor tensorflow-io): each worker
process would pay ~6 s of CPU for it before its first element (see bench/bench_materialize.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

from tests.materialize import generate

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every module whose functions or classes a job's DoFns, CombineFns and lambdas reference, so a
# worker imports it when it unpickles them: what both jobs share, then each job's own.
_SHARED_WORKER_MODULES = (
    "tfx_dynamic_inputs.examples",
    "tfx_dynamic_inputs.layout",
    "tfx_dynamic_inputs.materialize",
    "tfx_dynamic_inputs.materialize.commit_file",
    "tfx_dynamic_inputs.materialize.common",
    "tfx_dynamic_inputs.materialize.config",
    "tfx_dynamic_inputs.materialize.errors",
    "tfx_dynamic_inputs.materialize.id_index",
    "tfx_dynamic_inputs.materialize.paths",
    "tfx_dynamic_inputs.materialize.pictures",
    "tfx_dynamic_inputs.materialize.rejects",
    "tfx_dynamic_inputs.materialize.run_dir",
    "tfx_dynamic_inputs.materialize.shards",
    "tfx_dynamic_inputs.materialize.spill",
    "tfx_dynamic_inputs.materialize.stages",
    "tfx_dynamic_inputs.materialize.stages.commit",
    "tfx_dynamic_inputs.materialize.stages.plan",
    "tfx_dynamic_inputs.materialize.stages.read",
    "tfx_dynamic_inputs.materialize.stages.run",
    "tfx_dynamic_inputs.materialize.stages.write",
    "tfx_dynamic_inputs.materialize.text_records",
    "tfx_dynamic_inputs.materialize.verdict",
    "tfx_dynamic_inputs.models",
    "tfx_dynamic_inputs.models.charts",
)
PAIRS_WORKER_MODULES = tuple(
    sorted(
        _SHARED_WORKER_MODULES
        + (
            "tfx_dynamic_inputs.materialize.images",
            "tfx_dynamic_inputs.materialize.pair_index",
            "tfx_dynamic_inputs.materialize.pair_list",
            "tfx_dynamic_inputs.materialize.pairs_pipeline",
        )
    )
)
# The same for the audio job's transforms: decoding needs libsndfile, FFmpeg and soxr only.
AUDIO_WORKER_MODULES = tuple(
    sorted(
        _SHARED_WORKER_MODULES
        + (
            "tfx_dynamic_inputs.materialize.audio",
            "tfx_dynamic_inputs.materialize.audio_pipeline",
            "tfx_dynamic_inputs.materialize.manifest",
            "tfx_dynamic_inputs.materialize.splits",
        )
    )
)


def test_pairs_worker_code_does_not_import_tensorflow(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "x" / "sub").mkdir(parents=True)
    (tmp_path / "x" / "a.png").write_bytes(generate.image_bytes(rng))
    (tmp_path / "x" / "b.png").write_bytes(b"not an image")
    script = textwrap.dedent(
        f"""
        import importlib, sys
        for name in {PAIRS_WORKER_MODULES!r}:
            importlib.import_module(name)
        from tfx_dynamic_inputs.materialize import images, pair_list, pairs_pipeline, paths, spill
        root = {str(tmp_path / "x")!r}
        listed = sorted(paths.list_files(root))
        batch = [(paths.relative_id(root, p), p) for p in listed + [root + "/missing.png"]]
        batch.append(("sub", root + "/sub"))
        decode = pairs_pipeline._DecodeImages(
            {{"x": root}}, images.ImageStorage(), {str(tmp_path / "out")!r}
        )
        decode.start_bundle()
        outputs = list(decode.process(("x", batch)))
        decode.finish_bundle()
        spill.read_frames(outputs[-1][2])
        pair_list.parse_entry('{{"x": "a.png", "y": ["b.png"]}}', "jsonl")
        print("OUTPUTS", len(outputs))
        print("TF_MODULES", sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    # One batch of records (a.png) and three rejects: corrupt, missing, a directory.
    assert "OUTPUTS 4" in result.stdout, result.stdout
    assert "TF_MODULES []" in result.stdout, result.stdout


def test_audio_worker_code_does_not_import_tensorflow(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "vox"
    generate.write_file(
        str(root), "id1/v/a.wav", generate.wav_bytes(generate.tone(rng, 2000, 2), 22050)
    )
    stereo = generate.tone(rng, 4000, 2) / 32768.0
    generate.write_file(str(root), "id1/v/b.m4a", generate.m4a_bytes(stereo, 44100))
    generate.write_file(str(root), "id2/v/c.mp3", b"not an mp3")
    generate.write_file(str(root), "loose.flac", b"")
    script = textwrap.dedent(
        f"""
        import importlib, sys
        for name in {AUDIO_WORKER_MODULES!r}:
            importlib.import_module(name)
        from tfx_dynamic_inputs.materialize import audio_pipeline, manifest, spill
        from tfx_dynamic_inputs.materialize.config import AudioLimits
        rows, rejected = [], []
        for row in audio_pipeline._rows_of_files({str(root)!r}):
            (rows if isinstance(row, manifest.ManifestRow) else rejected).append(row)
        decode = audio_pipeline._DecodeUtterances(
            {str(root)!r}, 16000, {str(tmp_path / "out")!r}, AudioLimits()
        )
        decode.setup()
        decode.start_bundle()
        outputs = list(decode.process(sorted(rows)))
        decode.finish_bundle()
        decode.teardown()
        kept = [out for out in outputs if isinstance(out, audio_pipeline.Utterance)]
        spill.read_payloads([utterance.pcm for utterance in kept])
        print("ROWS", len(rows), "REJECTED", len(rejected), "KEPT", len(kept))
        print("TF_MODULES", sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"))
        print("TFIO_MODULES", sorted(m for m in sys.modules if m.startswith("tensorflow_io")))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    # Three files in speaker folders (two decode, one is not audio); one directly under the root.
    assert "ROWS 3 REJECTED 1 KEPT 2" in result.stdout, result.stdout
    assert "TF_MODULES []" in result.stdout, result.stdout
    assert "TFIO_MODULES []" in result.stdout, result.stdout
