"""`--spill {auto,files,none}`: every mode writes the same run, byte for byte; spill files go
where the mode says (below --temp_location when given) and none is left behind; `auto` holds
payloads in the launcher's process up to its budget first, and holds none once the job ends."""

from __future__ import annotations

import os
import socket
import subprocess

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from apache_beam.runners.portability.portable_runner import PortableRunner

from tests.materialize import generate, readback
from tfx_dynamic_inputs import layout
from tfx_dynamic_inputs.materialize import (
    AudioConfig,
    MaterializeError,
    PairsConfig,
    claims,
    held_payloads,
    run_audio,
    run_pairs,
    spill,
    stages,
)
from tfx_dynamic_inputs.materialize import __main__ as materialize_cli
from tfx_dynamic_inputs.materialize.config import from_flat
from tfx_dynamic_inputs.materialize.stages.read import spreads_work

# (--spill, whether the run gets a --temp_location, the bytes `auto` may hold in memory: None for
# `held_payloads.HELD_BYTES_BUDGET`, far above these inputs)
MODES = [
    ("auto", False, None),
    ("auto", True, 3000),
    ("files", False, None),
    ("none", False, None),
    ("files", True, None),
]


def _pairs_inputs(root) -> list[str]:
    """Images in X and Y (one empty), a pair list with an unknown y; the job's CLI flags."""
    rng = np.random.default_rng(11)
    x_names = [f"d{i % 3}/x{i:02d}.{'png' if i % 4 else 'jpg'}" for i in range(23)]
    y_names = [f"y{i:02d}.png" for i in range(17)]
    generate.write_images(str(root / "x"), x_names, rng)
    generate.write_images(str(root / "y"), y_names, rng)
    # Empty: Pillow's message for an unidentifiable image names a memory address, which differs
    # between runs.
    generate.write_file(str(root / "y"), "broken.png", b"")
    pairs = {x: [str(y) for y in rng.choice(y_names + ["ghost.png"], 3)] for x in x_names[:-2]}
    generate.write_pairs_jsonl(str(root / "pairs.jsonl"), pairs)
    return [
        "pairs",
        *("--x_dir", str(root / "x"), "--y_dir", str(root / "y")),
        *("--pairs", str(root / "pairs.jsonl"), "--files_per_batch", "5"),
        *("--max_shard_bytes", "3000", "--max_reject_fraction", "1"),
    ]


def _audio_inputs(root) -> list[str]:
    """Speakers' utterances at several rates (some stereo, one corrupt) in a manifest whose
    split column makes two labelled record sets; the job's CLI flags."""
    rng = np.random.default_rng(12)
    rows = []
    for s in range(5):
        for u in range(int(rng.integers(2, 5))):
            rate = int(rng.choice([16000, 8000, 22050]))
            samples = generate.tone(
                rng, int(rate * rng.uniform(0.05, 0.2)), int(rng.integers(1, 3))
            )
            encode = generate.flac_bytes if u % 2 else generate.wav_bytes
            path = f"speaker{s}/utt{u}.{'flac' if u % 2 else 'wav'}"
            generate.write_file(str(root / "audio"), path, encode(samples, rate))
            rows.append({"path": path, "speaker": f"speaker{s}", "split": ["train", "dev"][u % 2]})
    generate.write_file(str(root / "audio"), "speaker0/bad.wav", b"RIFF....WAVEjunk")
    rows.append({"path": "speaker0/bad.wav", "speaker": "speaker0", "split": "train"})
    generate.write_manifest_csv(str(root / "manifest.csv"), rows, ("path", "speaker", "split"))
    return [
        "audio",
        *("--manifest", str(root / "manifest.csv"), "--root", str(root / "audio")),
        *("--max_shard_bytes", "20000", "--max_reject_fraction", "0.5"),
    ]


_JOBS = {
    "pairs": (_pairs_inputs, PairsConfig, run_pairs),
    "audio": (_audio_inputs, AudioConfig, run_audio),
}


@pytest.fixture
def created(monkeypatch) -> list[str]:
    """The path of every file the job's writers create (shards, spill files), in order."""
    paths: list[str] = []
    create = layout.create

    def recording(path: str):
        paths.append(path)
        return create(path)

    monkeypatch.setattr(layout, "create", recording)
    return paths


@pytest.mark.parametrize("job", sorted(_JOBS))
def test_every_spill_mode_writes_the_same_run_and_leaves_no_spill_file(
    tmp_path, created, monkeypatch, job
):
    make_inputs, config_class, run = _JOBS[job]
    flags = make_inputs(tmp_path)
    runs = {}
    held = readback.record_holders(monkeypatch)
    default_budget = held_payloads.HELD_BYTES_BUDGET
    for mode, with_temp, budget in MODES:
        name = f"{mode}_temp" if with_temp else mode
        output_dir, temp_location = str(tmp_path / name), str(tmp_path / f"{name}.tmp")
        os.makedirs(temp_location)
        del created[:], held[:]
        monkeypatch.setattr(held_payloads, "HELD_BYTES_BUDGET", budget or default_budget)
        job_flags = [*flags, "--output_dir", output_dir, "--spill", mode]
        if with_temp:
            # Through the CLI: --temp_location is a Beam option, passed on to the pipeline.
            assert materialize_cli.main([*job_flags, f"--temp_location={temp_location}"]) == 0
        else:
            values = materialize_cli._parser().parse_args(job_flags)
            run(from_flat(config_class, vars(values)))
        spilled = [
            path
            for path in created
            if f"/{spill.SPILL_PREFIX}" in path or f"/{spill.TEMP_ROOT_PREFIX}" in path
        ]
        # `auto` holds payloads on the in-memory DirectRunner: all of them within its budget.
        assert [0 < holder.held_bytes <= (budget or default_budget) for holder in held] == (
            [True] if mode == "auto" else []
        )
        if mode == "none" or (mode == "auto" and budget is None):
            assert spilled == []
        else:
            # The rest spills, below the temp location when given.
            spill_root = (
                os.path.join(temp_location, spill.TEMP_ROOT_PREFIX) if with_temp else output_dir
            )
            assert spilled and all(path.startswith(spill_root) for path in spilled), spilled
        # What a run held is dropped when its job ends.
        assert all(held_payloads.holder_of(holder.root) is None for holder in held)
        assert readback.spill_entries(output_dir) == []
        assert os.listdir(temp_location) == []
        runs[name] = readback.run_files(output_dir)

    first = runs.pop("auto")
    assert sum(name.endswith(".tfrecord") for name in first) > 2
    assert layout.REJECTS_FILE in first and layout.SUMMARY_FILE in first
    for name, files in runs.items():
        assert files.keys() == first.keys(), name
        assert [path for path in first if files[path] != first[path]] == [], name


@pytest.mark.parametrize("value", ["shared", "", "None"])
def test_a_bad_spill_value_is_one_line_naming_the_flag(tmp_path, capsys, value):
    flags = _pairs_inputs(tmp_path)
    status = materialize_cli.main([*flags, "--output_dir", str(tmp_path / "out"), "--spill", value])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err == (
        f"materialize pairs: error: --spill must be one of auto, files, none; got {value!r}\n"
    )
    assert not os.path.exists(tmp_path / "out")


def _pipeline(unrun: list, runner, *args: str) -> beam.Pipeline:
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(list(args)))
    unrun.append(pipeline)
    return pipeline


def test_auto_spills_on_local_runners_only(tmp_path, unrun_pipelines):
    output_dir = str(tmp_path / "out")
    _claimed(output_dir, "b2" * 16, os.getpid())
    # The spill folder is named by the run id of the claim: only this run's is ever removed.
    folder = os.path.join(output_dir, spill.SPILL_PREFIX + "b2" * 16)
    for runner in ("DirectRunner", FnApiRunner(), "BundleBasedDirectRunner"):
        assert (
            spill.resolve_spill_root("auto", _pipeline(unrun_pipelines, runner), output_dir)
            == folder
        )
    for runner in (PortableRunner(), "FlinkRunner", "SparkRunner"):
        assert (
            spill.resolve_spill_root("auto", _pipeline(unrun_pipelines, runner), output_dir) is None
        )
        assert (
            spill.resolve_spill_root("files", _pipeline(unrun_pipelines, runner), output_dir)
            == folder
        )
    assert (
        spill.resolve_spill_root("none", _pipeline(unrun_pipelines, "DirectRunner"), output_dir)
        is None
    )
    assert os.listdir(output_dir) == [layout.CLAIM_FILE]  # nothing written but the claim


@pytest.mark.parametrize(
    "runner, args, spreads",
    [
        ("DirectRunner", (), False),
        ("DirectRunner", ("--direct_running_mode=in_memory",), False),
        ("DirectRunner", ("--direct_running_mode=multi_threading", "--direct_num_workers=2"), True),
        ("DirectRunner", ("--direct_running_mode=multi_processing",), True),
        ("DirectRunner", ("--streaming",), True),
        (FnApiRunner(), (), True),
        (PortableRunner(), (), True),
        ("FlinkRunner", (), True),
    ],
)
def test_work_is_spread_wherever_more_than_one_worker_may_run_it(
    unrun_pipelines, runner, args, spreads
):
    """The readers' work items are reshuffled except on the in-memory DirectRunner, whose one
    worker runs every bundle (the `Reshuffle` would cost its start-up and spread nothing)."""
    pipeline = _pipeline(unrun_pipelines, runner, *args)
    assert spreads_work(pipeline) == spreads
    items = pipeline | beam.Create([1, 2])
    _ = items | stages.ReadSpread(beam.Map(lambda item: item).dofn, main="read")
    labels = []

    class Labels(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            labels.append(node.full_label)

    pipeline.visit(Labels())
    assert any("/Spread/" in label for label in labels) == spreads


def _claimed(output_dir: str, run_id: str, pid: int) -> None:
    os.makedirs(output_dir, exist_ok=True)
    assert claims.try_claim(output_dir, claims.Claim(run_id, socket.gethostname(), pid, "t"))


def test_spill_files_below_the_temp_location_are_found_through_the_output_dir(
    tmp_path, unrun_pipelines
):
    output_dir, temp_location = str(tmp_path / "out"), str(tmp_path / "tmp")
    _claimed(output_dir, "c3" * 16, os.getpid())
    pipeline = _pipeline(unrun_pipelines, "DirectRunner", f"--temp_location={temp_location}")
    root = spill.resolve_spill_root("files", pipeline, output_dir)
    assert root == os.path.join(temp_location, spill.TEMP_ROOT_PREFIX + "c3" * 16)
    writer = spill.SpillWriter(root)
    [ref] = writer.write([b"a payload"])
    writer.close()
    assert ref.path.startswith(root + os.sep)
    assert spill.read_payloads([ref]) == [b"a payload"]
    assert os.path.isfile(spill.spill_dir(output_dir, "c3" * 16))  # the pointer, not spill files

    spill.remove_spill_dir(output_dir, "c3" * 16)
    assert not os.path.exists(spill.spill_dir(output_dir, "c3" * 16))
    assert os.listdir(temp_location) == []


def test_a_stale_claim_takeover_removes_spill_files_below_the_temp_location(
    tmp_path, unrun_pipelines
):
    output_dir, temp_location = str(tmp_path / "out"), str(tmp_path / "tmp")
    launcher = subprocess.Popen(["sleep", "120"])
    try:
        _claimed(output_dir, "d4" * 16, launcher.pid)
        pipeline = _pipeline(unrun_pipelines, "DirectRunner", f"--temp_location={temp_location}")
        writer = spill.SpillWriter(spill.resolve_spill_root("files", pipeline, output_dir))
        [orphan] = writer.write([b"left by a launcher that was killed"])
        writer.close()
        assert os.path.exists(orphan.path)
    finally:
        launcher.kill()
        launcher.wait()

    def build(pipeline: beam.Pipeline) -> None:
        run_id = claims.claimed_run_id(output_dir)
        _ = (
            pipeline
            | beam.Create([None])
            | beam.Map(lambda _: layout.commit_run(output_dir, run_id, {"ok": True}))
        )

    summary = stages.run_job(build, output_dir, False, (), None)
    assert summary["ok"]
    assert not os.path.exists(orphan.path)
    assert os.listdir(temp_location) == []
    assert os.listdir(output_dir) == [layout.SUMMARY_FILE]


def test_the_components_hand_spill_to_the_job(tmp_path, created):
    from tests.components.conftest import materialize  # imports TFX: only here
    from tfx_dynamic_inputs import component_keys as keys
    from tfx_dynamic_inputs.materialize_component import MaterializePairs

    flags = _pairs_inputs(tmp_path)
    values = materialize_cli._parser().parse_args([*flags, "--output_dir", "unused"])
    properties = {
        keys.X_DIR_KEY: values.x_dir,
        keys.Y_DIR_KEY: values.y_dir,
        keys.PAIRS_KEY: values.pairs,
        keys.MAX_REJECT_FRACTION_KEY: 1.0,
    }
    with pytest.raises(MaterializeError, match="--spill must be one of auto, files, none"):
        materialize(MaterializePairs, str(tmp_path / "bad"), {**properties, keys.SPILL_KEY: "x"})
    for mode in ("none", "files"):
        del created[:]
        outputs = materialize(
            MaterializePairs, str(tmp_path / mode), {**properties, keys.SPILL_KEY: mode}
        )
        spilled = [
            path
            for path in created
            if f"/{spill.SPILL_PREFIX}" in path or f"/{spill.TEMP_ROOT_PREFIX}" in path
        ]
        assert bool(spilled) == (mode == "files")
        assert outputs[keys.OFFSET_INDEX_KEY].get_json_value_custom_property("num_records")["x"]
