"""Resume geometry and plan options (issue 46): a sampler state names everything that shapes its
plan, so a checkpoint restored into a sampler with another seed or plan option is refused in one
line naming both, while one restored into the same plan, on any number of workers and replicas
that keeps the global batch, yields exactly the rest of the epoch in progress. Bad resume points
(`initial_step`, `initial_epoch`, `start_epoch`) are one-line errors where they are written."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.class_balanced.runs import write_audio_run
from tests.inputs import runs as run_files
from tests.inputs.test_elastic_resume import _contexts, _global_stream
from tfx_dynamic_inputs.inputs import ClassBalancedSampler, DynamicPairsSampler, RecordStore
from tfx_dynamic_inputs.inputs.epoch_state import EpochState, StateRunError
from tfx_dynamic_inputs.inputs.mixed_class_balanced import MixedClassBalancedSampler
from tfx_dynamic_inputs.inputs.mixed_pairs import MixedPairsSampler
from tfx_dynamic_inputs.inputs.run_mix import MixWeighting, RunMix, WeightedRun

NUM_X, NUM_Y = 21, 5
# Two class indexes of one size: "b" has a record more in its last class.
LABELS = {
    "a": np.repeat(np.arange(7), [4, 3, 1, 5, 2, 6, 3]),
    "b": np.repeat(np.arange(7), [4, 3, 1, 5, 2, 6, 4]),
}
MIX_SIZES = {"vox": [4, 3, 5, 2, 6, 3, 4], "mine": [3, 5, 2, 4, 3, 0, 4, 5, 3]}
PAIR_RUNS = {"horses": (9, 4), "zebras": (14, 6)}
# (workers, replicas per worker): a resume may take any of them that divides the global batch.
TOPOLOGIES = [(1, 1), (2, 1), (1, 2), (2, 2)]
SEEDS = st.integers(-(2**63), 2**63 - 1)

# Each kind's plan-shaping options, two values each: the first plan takes one, the resumed
# plan the same or (for the option changed) the other. The seeds are drawn apart.
PAIR_OPTIONS = {
    "strategy": ("uniform", "least_sampled"),
    "remainder": ("wrap", "drop"),
    "global_batch": (4, 8),
}
OPTIONS = {
    "pairs": {**PAIR_OPTIONS, "data": ("a", "b")},
    "mixed_pairs": {**PAIR_OPTIONS, "runs": (("horses", "zebras"), ("zebras", "horses"))},
    "class_balanced": {
        "small_classes": ("replace", "skip"),
        "epoch_mode": ("classes", "samples"),
        "max_draws_per_record": (None, 50),
        "n_p": (2, 3),
        "global_classes": (2, 4),
        "data": ("a", "b"),
    },
    "mixed_class_balanced": {
        "small_classes": ("replace", "skip"),
        "n_p": (2, 3),
        "global_classes": (2, 4),
        "weighting": ("classes", "batches"),
        "weights": ((1.0, 2.0), (2.0, 1.0)),
        "runs": (("vox", "mine"), ("mine", "vox")),
    },
}
# The row keys that show which samples a batch holds.
ROW_KEYS = {
    "pairs": ("x_index", "y_index"),
    "mixed_pairs": ("x_index", "y_index"),
    "class_balanced": ("index", "label"),
    "mixed_class_balanced": ("index", "label"),
}


def _valid_rows(data: str) -> list[list[int]]:
    rng = np.random.default_rng(0)
    rows = [
        rng.choice(NUM_Y, size=int(rng.integers(1, 4)), replace=False).tolist()
        for _ in range(NUM_X)
    ]
    if data == "b":
        rows[0] = sorted(set(range(NUM_Y)))  # more pairs, the same x
    return rows


@pytest.fixture(scope="module")
def mix_runs(tmp_path_factory) -> dict[str, str]:
    folders = {}
    for seed, (name, sizes) in enumerate(MIX_SIZES.items()):
        folder = str(tmp_path_factory.mktemp(name))
        write_audio_run(folder, sizes, seed=seed, min_samples=100, max_samples=200, num_shards=1)
        folders[name] = folder
    for seed, (name, (num_x, num_y)) in enumerate(PAIR_RUNS.items()):
        folder = str(tmp_path_factory.mktemp(name))
        for record_set, count in (("x", num_x), ("y", num_y)):
            records = [f"{name}-{record_set}-{i}".encode() for i in range(count)]
            run_files.write_record_set(folder, record_set, records, num_shards=1)
        rng = np.random.default_rng(seed)
        rows = [[int(y) for y in rng.choice(num_y, 2, replace=False)] for _ in range(num_x)]
        run_files.write_pairs(folder, rows)
        folders[name] = folder
    return folders


def _global_size(kind: str, options: dict) -> int:
    return options["global_batch"] if kind.endswith("pairs") else options["global_classes"]


def _sampler(kind: str, options: dict, context, runs: dict[str, str], state=None):
    """The sampler of `kind` with `options` (its seed among them) for the worker `context`."""
    replicas = context.num_replicas_in_sync
    per_replica = _global_size(kind, options) // replicas
    if kind == "pairs":
        x = np.arange(NUM_X, dtype=np.float32)[:, None]
        y = np.arange(NUM_Y, dtype=np.float32)[:, None]
        return DynamicPairsSampler(
            x,
            y,
            _valid_rows(options["data"]),
            batch_size=per_replica,
            strategy=options["strategy"],
            remainder=options["remainder"],
            seed=options["seed"],
            input_context=context,
            state=state,
        )
    if kind == "mixed_pairs":
        return MixedPairsSampler(
            {name: runs[name] for name in options["runs"]},
            batch_size=per_replica,
            strategy=options["strategy"],
            remainder=options["remainder"],
            seed=options["seed"],
            input_context=context,
            state=state,
        )
    if kind == "class_balanced":
        labels = LABELS[options["data"]]
        return ClassBalancedSampler(
            RecordStore.from_serialized([b"r%d" % i for i in range(len(labels))]),
            labels,
            n_classes_per_batch=per_replica,
            n_samples_per_class=options["n_p"],
            seed=options["seed"],
            epoch_mode=options["epoch_mode"],
            small_classes=options["small_classes"],
            max_draws_per_record=options["max_draws_per_record"],
            features=None,
            input_context=context,
            state=state,
        )
    mix = RunMix(
        tuple(
            WeightedRun(runs[name], weight, name)
            for name, weight in zip(options["runs"], options["weights"], strict=True)
        ),
        MixWeighting(options["weighting"]),
    )
    return MixedClassBalancedSampler(
        mix,
        n_classes_per_batch=per_replica,
        n_samples_per_class=options["n_p"],
        seed=options["seed"],
        small_classes=options["small_classes"],
        features=None,
        input_context=context,
        state=state,
    )


def _flat_rows(kind: str, sampler, epoch: int, first_row: int) -> dict[str, np.ndarray]:
    """The samples of `epoch`'s global plan from row `first_row` on, in stream order."""
    plan = sampler.planner.plan(epoch) if kind.endswith("pairs") else sampler.epoch_plan(epoch)
    return {key: plan[key].numpy()[first_row:].ravel() for key in ROW_KEYS[kind]}


def _flat_stream(kind: str, stream: list[dict]) -> dict[str, np.ndarray]:
    return {key: np.concatenate([batch[key] for batch in stream]) for key in ROW_KEYS[kind]}


def _differs_named(message: str, first, resumed, option: str, values: tuple) -> None:
    """`message` (a refusal in Python) names what differs between the two samplers' plans,
    both sides, on one line."""
    assert "\n" not in message
    if first.stream != resumed.stream:
        assert first.stream in message and resumed.stream in message, message
    elif first.plan_key != resumed.plan_key:
        held, mine = (dict(i.split("=") for i in s.plan_key.split(", ")) for s in (first, resumed))
        differ = [name for name in held if held[name] != mine[name]]
        for name in differ:
            assert f"{name}={held[name]}" in message and f"{name}={mine[name]}" in message
    else:
        assert option == "weights", f"{option} changed nothing the state names"
        assert first.weights_key in message and resumed.weights_key in message
    if option in ("seed", "small_classes", "strategy", "epoch_mode"):
        assert all(str(value) in message for value in values), message


def _graph_refusal_named(message: str, first, resumed) -> None:
    """The first line of a refusal in the graph names the state's stream or plan and the
    sampler's."""
    line = message.splitlines()[0]
    held, mine = (
        (first.stream, resumed.stream)
        if first.stream != resumed.stream
        else (first.plan_key, resumed.plan_key)
    )
    assert held != mine and held in line and mine in line, line


@st.composite
def _resumes(draw, kind: str):
    """(first options, resumed options, the option changed or None, topologies, restore)."""
    seeds = draw(st.lists(SEEDS, min_size=2, max_size=2, unique=True))
    first = {name: draw(st.sampled_from(values)) for name, values in OPTIONS[kind].items()}
    first["seed"] = seeds[0]
    # Half the cases resume the same plan, half change one option.
    changed = draw(st.one_of(st.none(), st.sampled_from(["seed", *OPTIONS[kind]])))
    resumed = dict(first)
    if changed == "seed":
        resumed["seed"] = seeds[1]
    elif changed is not None:
        values = OPTIONS[kind][changed]
        resumed[changed] = values[1 - values.index(first[changed])]
    fits = lambda options: [
        t for t in TOPOLOGIES if _global_size(kind, options) % (t[0] * t[1]) == 0
    ]
    before = draw(st.sampled_from(fits(first)))
    after = draw(st.sampled_from(fits(resumed)))
    # "before": restored, then a dataset resumed mid-epoch; "after": a dataset of the next epoch
    # built, then the state restored (the check runs in the graph).
    restore = draw(st.sampled_from(["before", "after"]))
    return first, resumed, changed, before, after, restore


def _check_resume(kind: str, case, step_draw: float, runs: dict[str, str], tmp_path) -> None:
    first, resumed, changed, before, after, restore = case
    stopped = _sampler(kind, first, _contexts(*before)[0], runs)
    steps = stopped.num_batches // (before[0] * before[1])
    if steps < 2:
        return  # no step inside the epoch to stop at
    step = 1 + int(step_draw * (steps - 1))
    elements = iter(stopped.dataset())
    for _ in range(step * before[1]):
        next(elements)
    path = tf.train.Checkpoint(sampler=stopped.state).write(str(tmp_path / f"{kind}-{step}"))
    samplers = [_sampler(kind, resumed, context, runs) for context in _contexts(*after)]
    plan_differs = changed is not None and changed != "weights"
    if restore == "before":
        for sampler in samplers:
            tf.train.Checkpoint(sampler=sampler.state).read(path).assert_consumed()
        if changed is not None:
            with pytest.raises(StateRunError) as refused:
                samplers[0].dataset(initial_step=step * after[1])
            values = (first[changed], resumed[changed])
            _differs_named(str(refused.value), stopped, samplers[0], changed, values)
            return
        got = _global_stream(samplers, after[1], step, steps - step)
        expected = _flat_rows(kind, stopped, 0, step * before[0] * before[1])
    else:
        datasets = [sampler.dataset() for sampler in samplers]
        for sampler in samplers:
            tf.train.Checkpoint(sampler=sampler.state).read(path).assert_consumed()
        if plan_differs:
            with pytest.raises(tf.errors.InvalidArgumentError) as refused:
                next(iter(datasets[0]))
            _graph_refusal_named(str(refused.value), stopped, samplers[0])
            return
        # The next epoch, whole: new weights (and with them its length) take effect there.
        next_steps = samplers[0].num_batches // (after[0] * after[1])
        got = _global_stream(samplers, after[1], 0, next_steps)
        expected = _flat_rows(kind, samplers[0], 1, 0)
    got = _flat_stream(kind, got)
    for key in ROW_KEYS[kind]:
        np.testing.assert_array_equal(got[key], expected[key])


RESUME_SETTINGS = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_a_resume_is_refused_naming_both_plans_or_yields_the_rest_of_the_epoch(
    kind, mix_runs, tmp_path
):
    @RESUME_SETTINGS
    @given(case=_resumes(kind), step_draw=st.floats(0, 1, exclude_max=True))
    def check(case, step_draw):
        _check_resume(kind, case, step_draw, mix_runs, tmp_path)

    check()


class _StateBeforePlanKeys(tf.Module):
    """The variables of a sampler state as checkpoints written before states named their plan
    hold them (`epoch`, `skipped_samples`, `run`, `stream`)."""

    def __init__(self, epoch: int, stream: str):
        super().__init__()
        self.epoch = tf.Variable(epoch, dtype=tf.int64)
        self.skipped_samples = tf.Variable(0, dtype=tf.int64)
        self.run = tf.Variable("")
        self.stream = tf.Variable(stream)


def _pairs_sampler(seed: int = 1, batch_size: int = 4) -> DynamicPairsSampler:
    x = np.arange(NUM_X, dtype=np.float32)[:, None]
    y = np.arange(NUM_Y, dtype=np.float32)[:, None]
    return DynamicPairsSampler(x, y, _valid_rows("a"), batch_size=batch_size, seed=seed)


def test_a_checkpoint_that_names_no_plan_resumes_with_a_warning_and_then_names_it(tmp_path, caplog):
    sampler = _pairs_sampler()
    old = _StateBeforePlanKeys(epoch=1, stream=sampler.stream)
    path = tf.train.Checkpoint(sampler=old).write(str(tmp_path / "old"))
    tf.train.Checkpoint(sampler=sampler.state).read(path)  # no `plan` in it to match
    with caplog.at_level(logging.WARNING):
        rest = list(sampler.dataset(initial_step=2))
    assert "the sampler state names no plan" in caplog.text
    expected = sampler.planner.plan(0)["x_index"].numpy()[2:]
    np.testing.assert_array_equal(np.stack([b["x_index"] for b in rest]), expected)
    assert sampler.state.plan.numpy().decode() == sampler.plan_key

    # It now names the plan: a sampler of another seed is refused.
    named = tf.train.Checkpoint(sampler=sampler.state).write(str(tmp_path / "named"))
    reseeded = _pairs_sampler(seed=2)
    tf.train.Checkpoint(sampler=reseeded.state).read(named).assert_consumed()
    with pytest.raises(
        StateRunError, match="planned with seed=1 but this sampler plans with seed=2"
    ):
        reseeded.dataset(initial_step=2)

    # And an old checkpoint of another global batch is still refused.
    wider = _pairs_sampler(batch_size=8)
    tf.train.Checkpoint(sampler=wider.state).read(path)
    with pytest.raises(StateRunError, match="global batches of 4 pairs .* global batches of 8"):
        wider.dataset(initial_step=1)


def _shown_value(value) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


RESUME_POINTS = st.one_of(
    st.integers(-3, 8),
    st.booleans(),
    st.booleans().map(np.bool_),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(0, 8).map(float),
    st.integers(0, 8).map(np.int32),
    st.text(max_size=2),
)


@settings(max_examples=25, deadline=None)
@given(initial_step=RESUME_POINTS)
def test_initial_step_is_an_int_in_the_epoch_or_a_one_line_error(initial_step):
    sampler = _pairs_sampler()  # 6 batches an epoch
    sampler.state.epoch.assign(1)  # as a checkpoint written during epoch 0
    is_int = isinstance(initial_step, int | np.integer) and not isinstance(initial_step, bool)
    if is_int and 0 <= initial_step < sampler.steps_per_epoch:
        dataset = sampler.dataset(initial_step=initial_step)
        assert len(list(dataset)) == sampler.steps_per_epoch - initial_step
        return
    with pytest.raises((TypeError, ValueError)) as refused:
        sampler.dataset(initial_step=initial_step)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("initial_step must be")
    assert _shown_value(initial_step) in message or str(initial_step) in message


def test_a_resume_point_without_a_restored_state_is_refused_when_the_dataset_is_built():
    sampler = _pairs_sampler()
    with pytest.raises(ValueError, match="initial_step=1 resumes the epoch in progress, but the"):
        sampler.dataset(initial_step=1)
    with pytest.raises(TypeError, match="initial_step must be an int, got the bool True"):
        sampler.dataset(initial_step=True)


@settings(max_examples=25, deadline=None)
@given(initial_epoch=RESUME_POINTS)
def test_initial_epoch_is_a_non_negative_int_or_a_one_line_error(initial_epoch):
    is_int = isinstance(initial_epoch, int | np.integer) and not isinstance(initial_epoch, bool)
    if is_int and initial_epoch >= 0:
        assert int(EpochState(initial_epoch=initial_epoch).epoch.numpy()) == initial_epoch
        return
    with pytest.raises((TypeError, ValueError)) as refused:
        EpochState(initial_epoch=initial_epoch)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("initial_epoch must be")


@pytest.mark.parametrize(
    "argument, value, error",
    [
        ("start_epoch", True, "start_epoch must be an int, got the bool True"),
        ("start_epoch", 1.5, "start_epoch must be an int, got float 1.5"),
        ("start_epoch", -1, "start_epoch must be >= 0, got -1"),
        ("num_epochs", 0, "num_epochs must be >= 1, got 0"),
        ("num_epochs", np.bool_(True), "num_epochs must be an int, got the bool True"),
    ],
)
def test_epochs_dataset_checks_its_epochs_where_written(argument, value, error):
    with pytest.raises((TypeError, ValueError), match=error):
        _pairs_sampler().epochs_dataset(**{argument: value})


@pytest.mark.parametrize(
    "kind, option, values",
    [
        ("pairs", "seed", (1, 2)),
        ("mixed_pairs", "seed", (1, 2)),
        ("class_balanced", "seed", (1, 2)),
        ("class_balanced", "small_classes", ("replace", "skip")),
        ("mixed_class_balanced", "seed", (1, 2)),
        ("mixed_class_balanced", "small_classes", ("replace", "skip")),
    ],
)
def test_a_mid_epoch_checkpoint_of_another_seed_or_small_classes_is_refused(
    kind, option, values, mix_runs, tmp_path
):
    """The issue's cases: resumed under the other value, the epoch in progress would be the
    other plan's rest after this plan's head (for the pairs, some x twice and others never)."""
    options = {name: choices[0] for name, choices in OPTIONS[kind].items()}
    first = {**options, "seed": 1, option: values[0]}
    other = {**first, option: values[1]}
    context = _contexts(1, 1)[0]
    stopped = _sampler(kind, first, context, mix_runs)
    elements = iter(stopped.dataset())
    next(elements)
    path = tf.train.Checkpoint(sampler=stopped.state).write(str(tmp_path / "ckpt"))
    if kind == "pairs":
        head = _flat_rows(kind, stopped, 0, 0)["x_index"][: first["global_batch"]]
        rest = _flat_rows(kind, _sampler(kind, other, context, mix_runs), 0, 1)["x_index"]
        assert len(set(head) | set(rest)) < NUM_X  # what the resume served before
    resumed = _sampler(kind, other, context, mix_runs)
    tf.train.Checkpoint(sampler=resumed.state).read(path).assert_consumed()
    with pytest.raises(StateRunError) as refused:
        resumed.dataset(initial_step=1)
    message = str(refused.value)
    assert "\n" not in message
    assert (
        f"planned with {option}={values[0]} but this sampler plans with {option}={values[1]}"
        in (message)
    )
