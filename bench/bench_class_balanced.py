"""Benchmark: class-balanced plans and batches vs what users run today.

Three measurements, each on one data set shared by all contenders:

1. **Plan rate** (record indices per second of planned epochs), for 1M utterances over 7,000
   classes (`--quick`: 100k over 1,000), `n_c=32, n_p=4`:
   * baseline: the Keras `Sequence` class balancer of
     shared/background/class-balanced-generator.txt (its index logic, reimplemented here);
   * peer: tensorflow-similarity's `MultiShotMemorySampler` (the library itself, when it
     imports here or in `--peer-python`; otherwise reported as not installed);
   * peer: pytorch-metric-learning's `MPerClassSampler` algorithm (reimplemented in NumPy);
   * ours: `ClassBalancedPlan` (classes mode), record numbers included.
   Each epoch is `ceil(classes / n_c)` batches; the class coverage of that epoch and the share of
   batches that repeat a record are reported too.
2. **Plan scale**: `epoch_mode="samples"` over 10M utterances of 50,000 speakers (`--quick`:
   1M), the whole epoch's plan against its first block of batches planned alone
   (`ClassBalancedPlan.plan_batches`, what the datasets run).
3. **End to end** batches/s with log-mel features (2 s crops, 80 bins): `class_balanced` over a
   materialized run (memory and disk backends) vs a sequential `TFRecordDataset` read + the same
   parse and features, without balancing.

Prints ratios and a JSON result (also written to `--output`). Medians of `--repeats` runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from json_report import write_report

N_C, N_P = 32, 4


# --------------------------------------------------------------------------------- data


def class_labels(num_records: int, num_classes: int, seed: int) -> np.ndarray:
    """Class id per record: log-normal class sizes (VoxCeleb-like), 1% of classes with 1-3
    records, records of a class scattered over the record order."""
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, 0.6, num_classes)
    small = rng.choice(num_classes, max(1, num_classes // 100), replace=False)
    sizes = np.floor(weights / weights.sum() * num_records).astype(np.int64)
    sizes[small] = rng.integers(1, N_P, len(small))
    sizes = np.maximum(sizes, 1)
    big = np.flatnonzero(sizes >= N_P)
    sizes[rng.choice(big)] += num_records - sizes.sum()
    labels = np.repeat(np.arange(num_classes), sizes)
    return labels[rng.permutation(num_records)]


# --------------------------------------------------------------------------------- baselines


class SequenceBaseline:
    """The index logic of the background's `SemiRandomDataGenerator(keras.utils.Sequence)`.

    Same data structures (string ids, a label dict, per-class lists), same per-epoch work
    (`on_epoch_end`: shuffle classes, shuffle each class, tile index arrays) and the id part of
    `__getitem__`; loading audio (`_generate_X`) is left out.
    """

    def __init__(self, list_ids, labels, n_c, n_p):
        self.list_ids = list_ids
        self.labels = labels
        self.n_c, self.n_p = n_c, n_p
        self.class_to_samples = {}
        for sample_id in list_ids:
            self.class_to_samples.setdefault(labels[sample_id], []).append(sample_id)
        # As in the original: classes with fewer than n_p samples are dropped, silently.
        self.valid_classes = [
            c for c in self.class_to_samples if len(self.class_to_samples[c]) >= n_p
        ]
        self.on_epoch_end()

    def __len__(self):
        return -(-len(self.valid_classes) // self.n_c)

    def __getitem__(self, index):
        batch_classes = self.shuffled_classes[index * self.n_c : (index + 1) * self.n_c]
        batch_ids = []
        for cls in batch_classes:
            sample_indices = self.class_sample_indices[cls][
                index * self.n_p : index * self.n_p + self.n_p
            ]
            if len(sample_indices) < self.n_p:
                remaining = self.n_p - len(sample_indices)
                sample_indices = np.concatenate(
                    [sample_indices, self.class_sample_indices[cls][:remaining]]
                )
            batch_ids.extend([self.class_to_samples[cls][i] for i in sample_indices])
        return batch_ids

    def on_epoch_end(self):
        np.random.shuffle(self.valid_classes)
        self.shuffled_classes = self.valid_classes.copy()
        self.class_sample_indices = {}
        for cls in self.valid_classes:
            samples = self.class_to_samples[cls]
            np.random.shuffle(samples)
            total_needed_samples = self.__len__() * self.n_p
            tile_count = int(np.ceil(total_needed_samples / len(samples)))
            self.class_sample_indices[cls] = np.tile(np.arange(len(samples)), tile_count)


def m_per_class_epoch(labels_to_indices, class_ids, n_c, n_p, num_batches, rng):
    """pytorch-metric-learning `MPerClassSampler.__iter__` for batch_size = n_c * n_p: per batch,
    shuffle the classes, take n_c, draw n_p of each (with replacement when the class is small)."""
    batches = []
    for _ in range(num_batches):
        rng.shuffle(class_ids)
        batch = []
        for c in class_ids[:n_c]:
            pool = labels_to_indices[c]
            batch.extend(rng.choice(pool, n_p, replace=len(pool) < n_p).tolist())
        batches.append(batch)
    return batches


def epoch_quality(batches: list, labels: np.ndarray) -> dict:
    """Class coverage of one epoch and repeated records inside batches.

    Coverage counts the classes with at least n_p records (every sampler here can serve those)
    and, separately, all classes with records. A repeat of a record of such a class inside a
    batch is a without-replacement violation; batches holding a class smaller than n_p (which
    must repeat, or be dropped) are counted apart.
    """
    sizes = np.bincount(labels)
    large = np.flatnonzero(sizes >= N_P)
    flat = np.asarray([i for batch in batches for i in batch], np.int64)
    seen = np.unique(labels[flat])
    repeats = small = 0
    for batch in batches:
        batch_labels = labels[np.asarray(batch)]
        in_large = sizes[batch_labels] >= N_P
        large_records = np.asarray(batch)[in_large]
        repeats += len(np.unique(large_records)) < len(large_records)
        small += not in_large.all()
    return {
        "class_coverage": round(len(np.intersect1d(seen, large)) / len(large), 4),
        "class_coverage_all_classes": round(len(seen) / int((sizes > 0).sum()), 4),
        "batches_repeating_a_record_of_a_large_class": repeats,
        "batches_with_a_small_class": small,
        "short_batches": sum(len(b) < N_C * N_P for b in batches),
    }


def time_interleaved(contenders: dict, repeats: int) -> dict:
    """Median seconds per epoch of each contender, epochs of all contenders interleaved so that
    they share the machine's load; also returns each contender's last epoch."""
    for run_epoch in contenders.values():
        run_epoch(0)
    times = {name: [] for name in contenders}
    last = {}
    for epoch in range(1, repeats + 1):
        for name, run_epoch in contenders.items():
            start = time.perf_counter()
            last[name] = run_epoch(epoch)
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(t), last[name]) for name, t in times.items()}


# --------------------------------------------------------------------------------- peers


def tfsim_plan(labels: np.ndarray, num_batches: int, repeats: int) -> dict:
    """MultiShotMemorySampler epochs of `num_batches` batches (runs in any interpreter that has
    numpy and tensorflow_similarity)."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    from tensorflow_similarity.samplers import MultiShotMemorySampler

    with contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        sampler = MultiShotMemorySampler(
            np.arange(len(labels), dtype=np.int64),
            labels,
            classes_per_batch=N_C,
            examples_per_class_per_batch=N_P,
            steps_per_epoch=num_batches,
        )
        setup = time.perf_counter() - start

        def epoch(_):
            batches = [sampler[b][0].numpy().tolist() for b in range(num_batches)]
            sampler.on_epoch_end()
            return batches

        ((seconds, batches),) = time_interleaved({"tfsim": epoch}, repeats).values()
    import tensorflow_similarity

    return {
        "version": tensorflow_similarity.__version__,
        "setup_s": setup,
        "epoch_s": seconds,
        "batches": batches,
    }


def run_tfsim(labels, num_batches, repeats, peer_python) -> dict:
    try:
        import tensorflow_similarity  # noqa: F401
    except ImportError:
        if not peer_python:
            return {"status": "not installed (pass --peer-python with it installed)"}
    else:
        return tfsim_plan(labels, num_batches, repeats)
    with tempfile.TemporaryDirectory() as scratch:
        np.save(os.path.join(scratch, "labels.npy"), labels)
        out = os.path.join(scratch, "peer.json")
        command = [peer_python, __file__, "--tfsim-worker", scratch, str(num_batches), str(repeats)]
        env = dict(os.environ, TQDM_DISABLE="1", TF_CPP_MIN_LOG_LEVEL="3")
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0 or not os.path.exists(out):
            return {"status": f"failed in {peer_python}: {done.stderr.strip()[-500:]}"}
        with open(out) as f:
            return json.load(f)


def tfsim_worker(scratch: str, num_batches: str, repeats: str) -> None:
    labels = np.load(os.path.join(scratch, "labels.npy"))
    result = tfsim_plan(labels, int(num_batches), int(repeats))
    with open(os.path.join(scratch, "peer.json"), "w") as f:
        json.dump(result, f)


# --------------------------------------------------------------------------------- plan rate


def bench_plan_rate(num_records, num_classes, repeats, peer_python) -> dict:
    import tensorflow as tf

    from tfx_dynamic_inputs.inputs import ClassBalancedPlan

    labels = class_labels(num_records, num_classes, seed=0)
    sizes = np.bincount(labels, minlength=num_classes)
    num_large = int((sizes >= N_P).sum())
    num_batches = math.ceil(num_large / N_C)
    result = {
        "records": num_records,
        "classes": num_classes,
        "classes_with_n_p_or_more": num_large,
        "n_c": N_C,
        "n_p": N_P,
        "epoch_batches_for_peers": num_batches,
    }
    contenders, setups, to_records = {}, {}, {}

    # Baseline: the Keras Sequence (string ids, as users hold them).
    ids = [f"id{i:08d}" for i in range(num_records)]
    label_of = dict(zip(ids, labels.tolist(), strict=True))
    number_of = {sample_id: i for i, sample_id in enumerate(ids)}
    np.random.seed(0)
    start = time.perf_counter()
    sequence = SequenceBaseline(ids, label_of, N_C, N_P)
    setups["sequence"] = time.perf_counter() - start

    def sequence_epoch(_):
        sequence.on_epoch_end()
        return [sequence[b] for b in range(len(sequence))]

    contenders["sequence"] = sequence_epoch
    to_records["sequence"] = lambda batches: [[number_of[i] for i in b] for b in batches]

    # Ours: the vectorized plan in a tf.function, record numbers included.
    values = np.argsort(labels, kind="stable")
    row_splits = np.concatenate([[0], np.cumsum(sizes)])
    table = tf.constant(values)
    start = time.perf_counter()
    plan = ClassBalancedPlan(row_splits, n_classes_per_batch=N_C, n_samples_per_class=N_P)
    planned = tf.function(lambda epoch: tf.gather(table, plan.plan(epoch)["position"]))
    planned(tf.constant(0, tf.int64))
    setups["ours"] = time.perf_counter() - start
    contenders["ours"] = lambda e: planned(tf.constant(e, tf.int64)).numpy()
    to_records["ours"] = lambda batches: batches.tolist()

    # pytorch-metric-learning's algorithm, in NumPy.
    labels_to_indices = {c: np.flatnonzero(labels == c) for c in range(num_classes)}
    rng = np.random.default_rng(0)
    class_ids = np.arange(num_classes)
    contenders["m_per_class_numpy"] = lambda _: m_per_class_epoch(
        labels_to_indices, class_ids, N_C, N_P, num_batches, rng
    )

    timed = time_interleaved(contenders, repeats)
    for name, (seconds, batches) in timed.items():
        batches = to_records.get(name, lambda b: b)(batches)
        result[name] = {
            "setup_s": setups.get(name),
            "epoch_s": seconds,
            "batches_per_epoch": len(batches),
            "indices_per_s": sum(len(b) for b in batches) / seconds,
            **epoch_quality(batches, labels),
        }

    samples_args = dict(n_classes_per_batch=N_C, n_samples_per_class=N_P, epoch_mode="samples")
    samples = ClassBalancedPlan(row_splits, **samples_args)
    samples_plan = tf.function(lambda epoch: tf.gather(table, samples.plan(epoch)["position"]))
    ((seconds, last),) = time_interleaved(
        {"samples": lambda e: samples_plan(tf.constant(e, tf.int64)).numpy()},
        max(3, repeats // 2),
    ).values()
    result["ours_samples_mode"] = {
        "epoch_s": seconds,
        "indices_per_s": last.size / seconds,
        "batches_per_epoch": samples.num_batches,
        "record_coverage": round(len(np.unique(last)) / num_records, 4),
        "max_draws_per_record": int(np.bincount(last.ravel()).max()),
    }

    # The same epochs under the least draw cap the plan accepts (named when refused).
    try:
        ClassBalancedPlan(row_splits, max_draws_per_record=1, **samples_args)
        least = 1
    except ValueError as refused:
        least = int(re.search(r"pass at least (\d+)", str(refused)).group(1))
    start = time.perf_counter()
    capped = ClassBalancedPlan(row_splits, max_draws_per_record=least, **samples_args)
    capped_setup = time.perf_counter() - start
    capped_plan = tf.function(lambda epoch: tf.gather(table, capped.plan(epoch)["position"]))
    ((seconds, last),) = time_interleaved(
        {"capped": lambda e: capped_plan(tf.constant(e, tf.int64)).numpy()},
        max(3, repeats // 2),
    ).values()
    result["ours_samples_mode_capped"] = {
        "max_draws_per_record": least,
        "setup_s": capped_setup,
        "epoch_s": seconds,
        "drawn_at_most": int(np.bincount(last.ravel()).max()),
        "record_coverage": round(len(np.unique(last)) / num_records, 4),
    }

    peer = run_tfsim(labels, num_batches, repeats, peer_python)
    if "batches" in peer:
        batches = peer.pop("batches")
        peer["indices_per_s"] = num_batches * N_C * N_P / peer["epoch_s"]
        peer.update(epoch_quality(batches, labels))
        peer["status"] = "measured"
    result["tfsim_multishot"] = peer

    ours = result["ours"]["indices_per_s"]
    result["ratios"] = {
        "ours_vs_sequence": ours / result["sequence"]["indices_per_s"],
        "ours_vs_m_per_class": ours / result["m_per_class_numpy"]["indices_per_s"],
    }
    if peer.get("status") == "measured":
        result["ratios"]["ours_vs_tfsim"] = ours / peer["indices_per_s"]
    return result


def bench_plan_scale(num_records: int, repeats: int) -> dict:
    """Samples mode at scale: the whole epoch's plan against its first block of batches planned
    alone from their numbers (what the datasets run), fresh epochs, interleaved."""
    import tensorflow as tf

    from tfx_dynamic_inputs.inputs import ClassBalancedPlan
    from tfx_dynamic_inputs.inputs.epoch_plan import PLAN_BLOCK_BATCHES

    rng = np.random.default_rng(0)
    sizes = rng.integers(150, 251, num_records // 200)  # speakers of 150-250 utterances
    row_splits = np.concatenate([[0], np.cumsum(sizes)])
    plan = ClassBalancedPlan(
        row_splits, n_classes_per_batch=N_C, n_samples_per_class=N_P, epoch_mode="samples"
    )
    whole = tf.function(lambda epoch: plan.plan(epoch)["position"])
    block = tf.function(lambda epoch, numbers: plan.plan_batches(epoch, numbers)["position"])
    numbers = tf.range(PLAN_BLOCK_BATCHES, dtype=tf.int64)
    timed = time_interleaved(
        {
            "whole_epoch": lambda e: whole(tf.constant(e, tf.int64)).numpy(),
            "first_block": lambda e: block(tf.constant(e, tf.int64), numbers).numpy(),
        },
        repeats,
    )
    return {
        "records": int(row_splits[-1]),
        "classes": len(sizes),
        "batches_per_epoch": plan.num_batches,
        "plans_batches_alone": plan.plans_batches_alone,
        "block_batches": PLAN_BLOCK_BATCHES,
        "whole_epoch_s": timed["whole_epoch"][0],
        "first_block_s": timed["first_block"][0],
    }


# --------------------------------------------------------------------------------- end to end


def write_run(output_dir, num_records, num_classes, seed, num_shards=8, sample_rate=16000):
    """A materialized audio run (tfx_dynamic_inputs.layout) of noise-like utterances of 1.5-4 s."""
    import tensorflow as tf

    from tfx_dynamic_inputs import layout

    rng = np.random.default_rng(seed)
    labels = class_labels(num_records, num_classes, seed)
    bounds = np.linspace(0, num_records, num_shards + 1).astype(int)

    def utterance(i: int) -> bytes:
        length = int(rng.integers(int(1.5 * sample_rate), 4 * sample_rate))
        pcm = (rng.standard_normal(length) * 3000).astype("<i2")
        feature = {
            layout.AUDIO_KEY: _bytes(tf, pcm.tobytes()),
            layout.NUM_SAMPLES_KEY: _int(tf, length),
            layout.SAMPLE_RATE_KEY: _int(tf, sample_rate),
            layout.LABEL_KEY: _int(tf, int(labels[i])),
            layout.ID_KEY: _bytes(tf, f"utt{i:07d}".encode()),
        }
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    shards = (
        [utterance(i) for i in range(bounds[shard], bounds[shard + 1])]
        for shard in range(num_shards)
    )
    ids = [f"utt{i:07d}" for i in range(num_records)]
    paths = layout.write_record_set(output_dir, "train", shards, num_shards, ids)
    index_dir = layout.index_dir(output_dir, "train")
    layout.save_npy(os.path.join(index_dir, layout.CLASS_IDS_FILE), labels)
    sizes = np.bincount(labels, minlength=num_classes)
    layout.save_csr(
        layout.class_records_dir(output_dir, "train"),
        np.concatenate([[0], np.cumsum(sizes)]),
        np.argsort(labels, kind="stable"),
    )
    return paths


def _bytes(tf, value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(tf, value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def batches_per_second(datasets: dict, num_batches: int, repeats: int) -> dict:
    """Median batches/s of each dataset (after 3 warm-up batches), runs interleaved."""
    rates = {name: [] for name in datasets}
    for _ in range(repeats):
        for name, dataset in datasets.items():
            iterator = iter(dataset)
            for _ in range(3):
                next(iterator)
            start = time.perf_counter()
            for _ in range(num_batches):
                next(iterator)
            rates[name].append(num_batches / (time.perf_counter() - start))
            del iterator
    return {name: statistics.median(r) for name, r in rates.items()}


def setup_seconds(make_dataset, repeats: int) -> dict:
    """Median CPU seconds of building a dataset (tracing its functions) and of `iter()` on it,
    what Keras pays for each epoch (tf.data optimizes the dataset's functions again)."""
    build, first_iter = [], []
    for _ in range(repeats):
        start = time.process_time()
        dataset = make_dataset()
        built = time.process_time()
        iterator = iter(dataset)
        build.append(built - start)
        first_iter.append(time.process_time() - built)
        del iterator
    return {"build_s": statistics.median(build), "iter_s": statistics.median(first_iter)}


def bench_end_to_end(num_records, num_classes, n_c, num_batches, repeats, scratch) -> dict:
    import tensorflow as tf

    from tfx_dynamic_inputs import layout
    from tfx_dynamic_inputs.inputs import StoreOptions, class_balanced
    from tfx_dynamic_inputs.inputs.audio_config import AudioFeatureConfig, SpecAugment
    from tfx_dynamic_inputs.inputs.audio_features import audio_features
    from tfx_dynamic_inputs.inputs.record_store import RecordStore

    run_dir = os.path.join(scratch, "run")
    start = time.perf_counter()
    paths = write_run(run_dir, num_records, num_classes, seed=1)
    written = time.perf_counter() - start
    config = AudioFeatureConfig()
    batch_size = n_c * N_P

    def sequential_features(index, serialized):
        parsed = tf.io.parse_example(
            serialized,
            {
                layout.AUDIO_KEY: tf.io.FixedLenFeature([], tf.string),
                layout.SAMPLE_RATE_KEY: tf.io.FixedLenFeature([], tf.int64),
                layout.LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
            },
        )
        seed = tf.stack([tf.constant(0, tf.int64), index])
        features = audio_features(
            parsed[layout.AUDIO_KEY], config, seed, sample_rate=parsed[layout.SAMPLE_RATE_KEY]
        )
        return {"label": parsed[layout.LABEL_KEY], **features}

    sequential = (
        tf.data.TFRecordDataset(paths)
        .batch(batch_size, drop_remainder=True)
        .enumerate()
        .map(sequential_features, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
        .repeat()
    )
    result = {
        "records": num_records,
        "classes": num_classes,
        "shard_mb": round(sum(os.path.getsize(p) for p in paths) / 2**20, 1),
        "write_s": written,
        "batch": f"{n_c} x {N_P}",
        "features": "2 s random crop, 80 log-mel bins, 25/10 ms, mean normalization",
        "measured_batches": num_batches,
        "disk_reader": RecordStore.open(run_dir, "train", backend="disk").disk_reader,
    }

    def sampled(backend: str, spec_augment: SpecAugment | None = None):
        return class_balanced(
            run_dir,
            n_classes_per_batch=n_c,
            n_samples_per_class=N_P,
            features=dataclasses.replace(config, spec_augment=spec_augment),
            store_options=StoreOptions(backend=backend),
        )

    datasets = {"sequential": sequential}
    for backend in ("memory", "disk"):
        datasets[f"class_balanced_{backend}"] = sampled(backend).repeat()
    # After the datasets above: every function traced once already, as in a training process.
    result["setup_per_dataset"] = {
        "class_balanced_disk": setup_seconds(lambda: sampled("disk"), 2 * repeats + 1),
        "class_balanced_disk_spec_augment": setup_seconds(
            lambda: sampled("disk", SpecAugment()), 2 * repeats + 1
        ),
    }
    rates = batches_per_second(datasets, num_batches, repeats)
    for name, rate in rates.items():
        result[f"{name}_batches_per_s"] = rate
    for backend in ("memory", "disk"):
        ratio = rates[f"class_balanced_{backend}"] / rates["sequential"]
        result[f"ratio_{backend}_vs_sequential"] = ratio
    return result


# --------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--peer-python",
        default=os.environ.get("TFSIM_PYTHON", "/tmp/tfsim-venv/bin/python"),
        help="an interpreter with tensorflow-similarity, used when it does not import here",
    )
    parser.add_argument("--skip-end-to-end", action="store_true")
    parser.add_argument(
        "--output",
        default=os.path.join(os.path.dirname(__file__), "results", "class_balanced.json"),
    )
    parser.add_argument("--tfsim-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tfsim_worker:
        tfsim_worker(*args.tfsim_worker)
        return
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    peer_python = args.peer_python if os.path.exists(args.peer_python or "") else None
    random.seed(0)
    load_at_start = os.getloadavg()[0]
    goal = (
        "goal >= 30x, and >= 10x each peer, at 1M / 7,000; --quick is too small to show it"
        if args.quick
        else "goal >= 30x, and >= 10x each peer"
    )
    repeats = args.repeats or (3 if args.quick else 7)
    if args.quick:
        plan = bench_plan_rate(100_000, 1_000, repeats, peer_python)
    else:
        plan = bench_plan_rate(1_000_000, 7_000, repeats, peer_python)
    report = {
        "quick": args.quick,
        "repeats": repeats,
        "cpus": os.cpu_count(),
        "load_average_1min_at_start": load_at_start,
        "plan_rate": plan,
    }
    r = plan["ratios"]
    print(
        f"plan rate: ours {plan['ours']['indices_per_s']:,.0f} indices/s, Sequence "
        f"{plan['sequence']['indices_per_s']:,.0f} -> {r['ours_vs_sequence']:.1f}x ({goal}); "
        f"MPerClass {r['ours_vs_m_per_class']:.1f}x; tensorflow-similarity "
        + (
            f"{r['ours_vs_tfsim']:.1f}x"
            if "ours_vs_tfsim" in r
            else plan["tfsim_multishot"]["status"]
        )
    )
    loose, capped = plan["ours_samples_mode"], plan["ours_samples_mode_capped"]
    print(
        f"samples mode: {loose['epoch_s'] * 1000:.0f} ms an epoch, a record drawn up to "
        f"{loose['max_draws_per_record']} times; max_draws_per_record="
        f"{capped['max_draws_per_record']} (the least accepted): {capped['epoch_s'] * 1000:.0f} ms "
        f"({capped['epoch_s'] / loose['epoch_s']:.1f}x), drawn up to {capped['drawn_at_most']}"
    )
    scale = bench_plan_scale(1_000_000 if args.quick else 10_000_000, repeats)
    report["plan_scale"] = scale
    print(
        f"samples mode at {scale['records']:,} records / {scale['classes']:,} classes: the "
        f"epoch's first {scale['block_batches']} batches planned alone in "
        f"{scale['first_block_s'] * 1000:.1f} ms, the whole epoch ({scale['batches_per_epoch']:,} "
        f"batches) in {scale['whole_epoch_s'] * 1000:.0f} ms"
    )
    if not args.skip_end_to_end:
        scratch = tempfile.mkdtemp(prefix="bench-class-balanced-")
        try:
            if args.quick:
                e2e = bench_end_to_end(600, 60, 16, 12, repeats, scratch)
            else:
                e2e = bench_end_to_end(4000, 400, N_C, 40, max(3, repeats // 2), scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        report["end_to_end"] = e2e
        print(
            f"end to end: sequential {e2e['sequential_batches_per_s']:.2f} batches/s; "
            f"class_balanced memory {e2e['ratio_memory_vs_sequential']:.2f}x, disk "
            f"({e2e['disk_reader']} reader) {e2e['ratio_disk_vs_sequential']:.2f}x (goal >= 0.9x)"
        )
        for name, setup in e2e["setup_per_dataset"].items():
            print(
                f"{name}: built in {setup['build_s']:.2f} s of CPU, each epoch's iter() "
                f"{setup['iter_s']:.2f} s"
            )
    report["load_average_1min_at_end"] = os.getloadavg()[0]
    write_report(args.output, report)


if __name__ == "__main__":
    main()
