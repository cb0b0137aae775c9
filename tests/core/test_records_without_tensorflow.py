"""Opening and reading a run with `tfx_dynamic_inputs.records` never imports TensorFlow: in a
fresh interpreter (as a JAX or PyTorch program is), and in worker processes started the way
Grain starts them (spawned, the source pickled)."""

from __future__ import annotations

import json

from tests.core.records_runs import write_audio_run, write_image_run
from tests.helpers.subprocesses import run_python

_READ_EVERYTHING = """
import json, multiprocessing, pickle, sys
from tests.core.records_worker import payload_lengths
from tfx_dynamic_inputs.records import RunRecordSource

def read_all(source):
    return [source[i] for i in range(len(source))]

if __name__ == "__main__":
    audio = RunRecordSource({audio!r}, "train")
    images = RunRecordSource({images!r}, "x")
    records = read_all(audio) + read_all(images)
    audio.records.check_run()
    copy = pickle.loads(pickle.dumps(audio))
    assert [r["id"] for r in read_all(copy)] == [r["id"] for r in read_all(audio)]
    payloads = RunRecordSource({audio!r}, "train", decode="bytes")
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        in_workers = pool.map(payload_lengths, [payloads, payloads])
    print(json.dumps({{
        "records": len(records),
        "samples": sum(len(r["audio"]) for r in records if "audio" in r),
        "workers": in_workers,
        "tensorflow": "tensorflow" in sys.modules,
    }}))
"""


def test_opening_and_reading_a_run_imports_no_tensorflow(tmp_path):
    audio, images = tmp_path / "audio", tmp_path / "images"
    written = write_audio_run(str(audio), num_records=7)
    write_image_run(str(images), num_records=4)
    done = run_python(_READ_EVERYTHING.format(audio=str(audio), images=str(images)))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["records"] == 11
    assert result["samples"] > 0
    lengths = [len(payload) for payload in written]
    assert result["workers"] == [[lengths, False], [lengths, False]]
    assert result["tensorflow"] is False
