"""A real 2-process MultiWorkerMirroredStrategy on localhost: disjoint slices, union = plan."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np

from tests.inputs import multiworker_worker as worker
from tfx_dynamic_inputs.inputs import ValidPairs
from tfx_dynamic_inputs.inputs.pair_plan import PairPlanner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_take_disjoint_slices_of_the_same_plan(tmp_path):
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
    processes, outputs = [], []
    for index in range(2):
        output = tmp_path / f"worker{index}.json"
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
            TF_CPP_MIN_LOG_LEVEL="2",
            CUDA_VISIBLE_DEVICES="",
            PYTHONPATH=REPO,
        )
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.inputs.multiworker_worker", str(output)],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
        outputs.append(output)
    logs = []
    try:
        for process in processes:
            logs.append(process.communicate(timeout=180)[0].decode(errors="replace"))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, log in zip(processes, logs, strict=True):
        assert process.returncode == 0, log[-3000:]

    results = [json.loads(path.read_text()) for path in outputs]
    # The synchronous all-reduce trained one shared model.
    np.testing.assert_allclose(results[0]["weights"], results[1]["weights"], rtol=1e-6)

    planner = PairPlanner(
        ValidPairs.build(worker.valid_rows(), num_y=worker.NUM_Y),
        strategy="least_sampled",
        seed=worker.SEED,
        batch_size=worker.GLOBAL_BATCH // 2,
        num_workers=2,
    )
    for epoch in range(worker.EPOCHS):
        plan = planner.plan(epoch)
        batches = list(
            zip(plan["x_index"].numpy().tolist(), plan["y_index"].numpy().tolist(), strict=True)
        )
        per_worker = [[tuple(b) for b in r["pairs"][epoch]] for r in results]
        assert per_worker[0] == batches[0::2]
        assert per_worker[1] == batches[1::2]
        x_seen = [x for part in per_worker for xs, _ in part for x in xs]
        assert set(x_seen) == set(range(worker.NUM_X))
        assert len(x_seen) == planner.num_batches * planner.batch_size
