"""Real MultiWorkerMirroredStrategy processes on localhost, stopped and resumed elastically.

Three phases train on the same samplers (dynamic pairs; class-balanced audio batches with crops
and SpecAugment): 2 workers for 3 global steps, then 1 worker resumed from their checkpoint for
5, then 2 workers resumed from that one for 4. In each phase the workers take disjoint slices
of each step's global batch and train one shared model; across the phases, 2 -> 1 and 1 -> 2
workers, the global stream of batches is element by element what one uninterrupted
single-replica run yields (features included, sample by sample).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.class_balanced.runs import write_audio_run
from tests.helpers.installs import NEWEST_TENSORFLOW_ONLY
from tests.inputs import multiworker_worker as worker
from tfx_dynamic_inputs.inputs import ValidPairs
from tfx_dynamic_inputs.inputs.pair_plan import PairPlanner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (workers, global steps) of each phase; each resumes where the one before stopped.
PHASES = [(2, 3), (1, 5), (2, 4)]


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _phase(tmp_path, run_dir: str, phase: int, workers: int, first_step: int, steps: int):
    """Runs one phase's worker processes; returns each worker's JSON results."""
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(workers)]}
    checkpoint_in = str(tmp_path / f"phase{phase - 1}") if phase else ""
    processes, outputs = [], []
    for index in range(workers):
        output = tmp_path / f"phase{phase}-worker{index}.json"
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
            TF_CPP_MIN_LOG_LEVEL="2",
            CUDA_VISIBLE_DEVICES="",
            PYTHONPATH=REPO,
        )
        command = [sys.executable, "-m", "tests.inputs.multiworker_worker", str(output), run_dir]
        command += [checkpoint_in, str(tmp_path / f"phase{phase}"), str(first_step), str(steps)]
        processes.append(
            subprocess.Popen(
                command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        )
        outputs.append(output)
    logs = []
    try:
        for process in processes:
            logs.append(process.communicate(timeout=240)[0].decode(errors="replace"))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, log in zip(processes, logs, strict=True):
        assert process.returncode == 0, log[-3000:]
    return [json.loads(path.read_text()) for path in outputs]


def _uninterrupted_classes(run_dir: str, num_steps: int) -> list[dict]:
    """The single-replica class-balanced stream: global batches of `GLOBAL_CLASSES` classes."""
    sampler = worker.class_sampler(run_dir, tf.distribute.InputContext())
    stream = []
    while len(stream) < num_steps:
        for batch in sampler.dataset():
            stream.append(
                {
                    "index": batch["index"].numpy().tolist(),
                    "label": batch["label"].numpy().tolist(),
                    "features": worker.sample_digests(batch["features"].numpy()),
                }
            )
    return stream[:num_steps]


@NEWEST_TENSORFLOW_ONLY
@pytest.mark.slow
def test_workers_resume_elastically_2_to_1_to_2(tmp_path):
    run_dir = str(tmp_path / "audio_run")
    write_audio_run(run_dir, worker.CLASS_SIZES, seed=3)
    got = {"pairs": [], "classes": []}
    first_step = 0
    for phase, (workers, steps) in enumerate(PHASES):
        results = _phase(tmp_path, run_dir, phase, workers, first_step, steps)
        for kind in got:
            # The synchronous all-reduce trained one shared model.
            for other in results[1:]:
                np.testing.assert_allclose(
                    other[kind]["weights"], results[0][kind]["weights"], rtol=1e-6
                )
            for step in range(steps):
                # Worker w holds slice w of each step's global batch (one replica a worker).
                slices = [r[kind]["steps"][step][0] for r in results]
                got[kind].append({k: sum((s[k] for s in slices), []) for k in slices[0]})
        first_step += steps
    total = first_step

    planner = PairPlanner(
        ValidPairs.build(worker.valid_rows(), num_y=worker.NUM_Y),
        strategy="least_sampled",
        seed=worker.SEED,
        batch_size=worker.GLOBAL_BATCH,
    )
    expected_pairs = []
    for epoch in range(total // planner.num_batches + 1):
        plan = planner.plan(epoch)
        for x_index, y_index in zip(plan["x_index"].numpy(), plan["y_index"].numpy(), strict=True):
            expected_pairs.append({"x_index": x_index.tolist(), "y_index": y_index.tolist()})
    assert got["pairs"] == expected_pairs[:total]
    # Every x once an epoch (37 x in 5 global batches of 8: 3 repeat), in the resumed ones too.
    first_epoch = [x for batch in got["pairs"][:5] for x in batch["x_index"]]
    assert set(first_epoch) == set(range(worker.NUM_X)) and len(first_epoch) == 40

    expected_classes = _uninterrupted_classes(run_dir, total)
    assert len(got["classes"]) == total
    for step, (a, b) in enumerate(zip(got["classes"], expected_classes, strict=True)):
        assert a == b, f"global step {step} differs"
        classes = a["label"][:: worker.N_P]
        assert len(set(classes)) == worker.GLOBAL_CLASSES
