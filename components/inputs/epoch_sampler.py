"""What both samplers share: this worker's slice of a per-epoch plan (`epoch_plan`), the state,
the skip count, and the datasets of batches, in this process or on tf.data service workers."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from tfx_dynamic_inputs.inputs import data_service
from tfx_dynamic_inputs.inputs.arguments import int_argument
from tfx_dynamic_inputs.inputs.epoch_plan import epoch_dataset, epoch_range_dataset
from tfx_dynamic_inputs.inputs.epoch_state import EpochState
from tfx_dynamic_inputs.inputs.graph_functions import as_written
from tfx_dynamic_inputs.inputs.record_store import RecordStore


class EpochSampler:
    """What both samplers share: this worker's slice of a per-epoch plan, the state, the skip
    count, and the datasets of batches (in this process, or on tf.data service workers).

    A sampler sets `state` (`EpochState`), `worker_index`, `num_workers` and `num_batches`
    (global batches per epoch, a multiple of `num_workers`), and implements `_plan(epoch)` (the
    global plan: a dict of int64 tensors with leading dimension `num_batches`) or, with
    `plans_batches_alone`, `_plan_batches(epoch, batch_numbers)` (those rows of it, computed
    from their numbers alone: the datasets then plan a batch at a time),
    `_load_batch(row, for_service=...)` (read and parse one batch; the row also holds its
    ``epoch``, for `SkipLog`), `_stores()` (the record stores it reads), `stream` and
    `plan_key` (what its state must name), and may extend `_service_problems()` (what keeps its
    dataset off tf.data service workers).
    """

    state: EpochState
    worker_index: int
    num_workers: int
    num_batches: int
    # Whether `_plan_batches` computes any batch of an epoch from its number alone; if not, the
    # datasets plan whole epochs (`_plan`).
    plans_batches_alone: bool = False
    # The resume step of the datasets `dataset()` builds, and where `rewind` puts them back.
    _steps_to_skip: tf.Variable | None = None
    _built_at: tuple[list, int] | None = None

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch on this worker."""
        return self.num_batches // self.num_workers

    @property
    def skipped_samples(self) -> int:
        """Samples left out of batches so far because their records are damaged (all epochs)."""
        return int(self.state.skipped_samples.numpy())

    @property
    def stream(self) -> str:
        """What fixes this sampler's stream of batches besides its data and seed, in words (the
        plan's `stream`: the global batch, and the replica count of a plan that is not elastic):
        what its `state.stream` must name."""
        raise NotImplementedError

    @property
    def plan_key(self) -> str:
        """What shapes this sampler's plan besides its runs (`run_key`) and its stream
        (`stream`), as `epoch_state.plan_key` writes it: the seed and the options the stream does
        not name, and the sizes of the data planned. Nothing in it depends on the number of
        workers or replicas, so an elastic resume keeps it. What its `state.plan` must name."""
        raise NotImplementedError

    @property
    def run_key(self) -> str:
        """The run ids of the stores this sampler reads, sorted, joined by ","; "" when none is a
        run (arrays, datasets): what its `state.run` must name."""
        return ",".join(sorted({store.run_id for store in self._stores() if store.run_id}))

    def dataset(
        self,
        *,
        initial_step: int = 0,
        num_parallel_calls: int = tf.data.AUTOTUNE,
        deterministic: bool = True,
    ) -> tf.data.Dataset:
        """Batches of this worker; each iteration of the dataset is the next epoch.

        The epoch advances in `state`, a variable of this process: for tf.data service workers
        use `distributed_dataset` (or `epochs_dataset`), not
        `dataset().apply(tf.data.experimental.service.distribute(...))`.

        Args:
          initial_step: resumes the epoch in progress at this batch of this worker (see
            `epoch_dataset`); 0 starts the next epoch.
          num_parallel_calls: parallelism of the read-and-parse map.
          deterministic: keep the batch order under parallel reads.

        Returns:
          A dataset of parsed batches (the sampler's structure, leading dimension the batch),
          `steps_per_epoch` of them per iteration.

        Raises:
          epoch_state.StateRunError: `state` follows another run than `run_key`, another
            stream than `stream` (a checkpoint of another global batch) or another plan than
            `plan_key` (of another seed or plan option).
          TypeError: `initial_step` not an int (a float, a bool).
          ValueError: `initial_step` outside `[0, steps_per_epoch)`, or above 0 with a state
            that has not started an epoch (no checkpoint restored).
        """
        initial_step = int_argument("initial_step", initial_step, 0)
        num_batches = self.num_batches
        run_key, stream, plan_key = self.run_key, self.stream, self.plan_key
        # A state of another plan first: its resume point means nothing to this one.
        self.state.bind_run(run_key, stream, plan_key)
        self._check_resume_point(initial_step)
        if self._steps_to_skip is None:
            # Outside any strategy scope, as the state's own variables.
            self._steps_to_skip = tf.Variable(0, dtype=tf.int64, trainable=False)
        # Where `rewind` puts the dataset back: the state as it is now, the resume step armed.
        self._built_at = ([v.numpy() for v in self.state.variables], initial_step)

        def checked(epoch: tf.Tensor) -> tf.Tensor:
            with tf.control_dependencies([self.state.check_run(run_key, stream, plan_key)]):
                return tf.identity(epoch)

        def plan_with_epoch(epoch: tf.Tensor) -> dict[str, tf.Tensor]:
            epoch = checked(epoch)
            return {**self._plan(epoch), "epoch": tf.fill([num_batches], epoch)}

        def batches_with_epoch(epoch: tf.Tensor, numbers: tf.Tensor) -> dict[str, tf.Tensor]:
            epoch = checked(epoch)
            rows = self._plan_batches(epoch, numbers)
            return {**rows, "epoch": tf.fill(tf.shape(numbers), epoch)}

        plan_fn, batch_plan_fn = self._plan_form(plan_with_epoch, batches_with_epoch)
        rows = epoch_dataset(
            plan_fn,
            batch_plan_fn=batch_plan_fn,
            num_batches=num_batches,
            state=self.state,
            num_workers=self.num_workers,
            worker_index=self.worker_index,
            initial_step=initial_step,
            steps_to_skip=self._steps_to_skip,
        )
        return rows.map(
            as_written(self._load_batch),
            num_parallel_calls=num_parallel_calls,
            deterministic=deterministic,
        ).prefetch(tf.data.AUTOTUNE)

    def _check_resume_point(self, initial_step: int) -> None:
        """Checks the resume point now: in this worker's batches of an epoch, and 0 unless the
        state has started an epoch (a resume restores its checkpoint first)."""
        if initial_step >= self.steps_per_epoch:
            raise ValueError(
                f"initial_step must be in [0, {self.steps_per_epoch}) (batches per worker per "
                f"epoch), got {initial_step}"
            )
        if initial_step and int(self.state.epoch.numpy()) == 0:
            raise ValueError(
                f"initial_step={initial_step} resumes the epoch in progress, but the sampler "
                "state has started no epoch (epoch 0): restore its checkpoint before building "
                "the dataset, or pass initial_step=0"
            )

    def rewind(self) -> None:
        """Puts the latest `dataset()` back where it was built: the state's values as they were
        then, and its resume step (`initial_step`) armed again for the next iteration.

        An iteration started and abandoned advances the state (its first element plans the
        epoch). Keras' `fit` does that under any `tf.distribute` strategy: it reads one batch
        from a fresh iterator to build the model before training. Call `rewind` after that
        read and before the first epoch (a callback's `on_train_begin`; the trainer component's
        checkpoints do), so that training starts at the epoch and step the dataset was built for.
        Before the first `dataset()` there is nothing to put back, and nothing changes.

        Example:

            dataset = sampler.dataset(initial_step=3)
            next(iter(dataset))  # a peek
            sampler.rewind()  # the next iteration is the resumed epoch again, from batch 3
        """
        if self._built_at is None:
            return
        values, initial_step = self._built_at
        for variable, value in zip(self.state.variables, values, strict=True):
            variable.assign(value)
        self._steps_to_skip.assign(initial_step)

    def epochs_dataset(
        self,
        *,
        start_epoch: int | None = None,
        num_epochs: int | None = None,
        num_parallel_calls: int = tf.data.AUTOTUNE,
        max_graph_bytes: int = data_service.DEFAULT_MAX_GRAPH_BYTES,
    ) -> tf.data.Dataset:
        """The batches of epochs `[start_epoch, start_epoch + num_epochs)` in one iteration, as a
        dataset that tf.data service workers can run (what `distributed_dataset` distributes).

        Each batch is computed from its batch number (`epoch_range_dataset`; with
        `plans_batches_alone`, a block of batches from the block's number), so its plan is the
        one `dataset()` yields for that epoch; the batches also hold ``epoch`` (int64 scalar),
        the epoch they belong to. Iterating again yields the same epochs again.

        Args:
          start_epoch: the first epoch; default `state.epoch` (the next one `dataset()` would
            plan). The state is read, never advanced: the workers cannot share it.
          num_epochs: epochs in the range; None for an unbounded one.
          num_parallel_calls: parallelism of the read-and-parse map.
          max_graph_bytes: the largest dataset graph to accept (it carries every in-memory
            record and index to the workers); at most 2 GB - 1.

        Returns:
          A dataset of parsed batches, each with ``epoch`` added (int64 scalar).

        Raises:
          data_service.ServiceUnsupportedError: now, not on a worker, when something cannot run
            there (the Python disk reader, on_damaged="skip", Python in a parse function, a
            graph over `max_graph_bytes`).
          epoch_state.StateRunError: `state` follows another run than `run_key`, another
            stream than `stream` (a checkpoint of another global batch) or another plan than
            `plan_key`.
          TypeError: `start_epoch` or `num_epochs` not an int (a float, a bool).
          ValueError: `start_epoch` below 0, `num_epochs` below 1, `max_graph_bytes` out of
            range, or a parsed batch that has an ``epoch`` key.
        """
        if start_epoch is not None:
            start_epoch = int_argument("start_epoch", start_epoch, 0)
        if num_epochs is not None:
            num_epochs = int_argument("num_epochs", num_epochs, 1)
        data_service.check_sampler(
            self._service_problems(),
            sum(store.memory_bytes for store in self._stores()),
            max_graph_bytes,
        )
        self.state.bind_run(self.run_key, self.stream, self.plan_key)
        if start_epoch is None:
            start_epoch = int(self.state.epoch.numpy())
        plan_fn, batch_plan_fn = self._plan_form(self._plan, self._plan_batches)
        rows = epoch_range_dataset(
            plan_fn,
            batch_plan_fn=batch_plan_fn,
            num_batches=self.num_batches,
            start_epoch=start_epoch,
            num_epochs=num_epochs,
            num_workers=self.num_workers,
            worker_index=self.worker_index,
        )

        def load(row: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            batch = self._load_batch(row, for_service=True)
            if "epoch" in batch:
                raise ValueError(
                    "the parsed batch has an 'epoch' key, which epochs_dataset uses for the "
                    "batch's epoch; rename it in parse_fn"
                )
            return {**batch, "epoch": row["epoch"]}

        dataset = rows.map(as_written(load), num_parallel_calls=num_parallel_calls).prefetch(
            tf.data.AUTOTUNE
        )
        data_service.check_dataset(dataset, max_graph_bytes)
        return dataset

    def distributed_dataset(
        self,
        service: str,
        *,
        processing_mode: str = "distributed_epoch",
        job_name: str | None = None,
        start_epoch: int | None = None,
        num_epochs: int | None = None,
        num_parallel_calls: int = tf.data.AUTOTUNE,
        max_graph_bytes: int = data_service.DEFAULT_MAX_GRAPH_BYTES,
    ) -> tf.data.Dataset:
        """`epochs_dataset` run by the tf.data service at `service` ("grpc://host:port", the
        dispatcher; start workers with `python -m tfx_dynamic_inputs.data_service_worker`).

        `processing_mode`:
          * ``"distributed_epoch"``: the service hands each batch number (with
            `plans_batches_alone`, each block of batch numbers) to one worker, so the client
            receives every batch of every epoch once (at most once if a worker is lost:
            the service's own guarantee), with each epoch's batches exactly `dataset()`'s for that
            epoch; the order across workers is not deterministic, and a few batches of
            consecutive epochs can interleave at their boundary (each batch carries ``epoch``).
          * ``"parallel_epochs"``: every worker runs the whole range, so with `W` workers the
            client receives each epoch `W` times, interleaved; with one worker it is exactly
            `dataset()`'s sequence of epochs.
        `job_name` shares one job among clients (each batch then goes to one of them). The
        dataset spans the epochs in one iteration: give Keras
        `steps_per_epoch=sampler.steps_per_epoch` (with num_epochs=None, the default, the range
        is unbounded). Iterating it again starts a new service job at `start_epoch`: a replay,
        which is what lets Keras read a first batch to build the model and then train from the
        start. To continue later, build another one with the next `start_epoch`.

        Args:
          service: the dispatcher's address.
          processing_mode: ``"distributed_epoch"`` or ``"parallel_epochs"`` (above).
          job_name: a job shared among clients, or None for one of this client's own.
          start_epoch, num_epochs, num_parallel_calls, max_graph_bytes: as in
            `epochs_dataset`.

        Returns:
          The distributed dataset of `epochs_dataset`'s batches (each with ``epoch``).

        Raises:
          ValueError: an unknown `processing_mode`; and the errors of `epochs_dataset`.

        Example:

            ds = sampler.distributed_dataset("grpc://dispatcher:5050", num_epochs=10)
            model.fit(ds, epochs=10, steps_per_epoch=sampler.steps_per_epoch)
        """
        data_service.check_processing_mode(processing_mode)
        dataset = self.epochs_dataset(
            start_epoch=start_epoch,
            num_epochs=num_epochs,
            num_parallel_calls=num_parallel_calls,
            max_graph_bytes=max_graph_bytes,
        )
        return dataset.apply(
            tf.data.experimental.service.distribute(processing_mode, service, job_name=job_name)
        )

    def _service_problems(self) -> list[str]:
        """What keeps this sampler's batches off tf.data service workers (empty: nothing)."""
        return [problem for store in self._stores() for problem in store.service_problems()]

    def _stores(self) -> list[RecordStore]:
        raise NotImplementedError

    def _plan_form(self, plan_fn: Callable, batch_plan_fn: Callable) -> tuple:
        """`(plan_fn, batch_plan_fn)` for `epoch_plan`'s datasets: the form this sampler plans
        in (`plans_batches_alone`), traced as written, and None for the other."""
        if self.plans_batches_alone:
            return None, as_written(batch_plan_fn)
        return as_written(plan_fn), None

    def _plan(self, epoch: tf.Tensor) -> dict[str, tf.Tensor]:
        raise NotImplementedError

    def _plan_batches(self, epoch: tf.Tensor, batch_numbers: tf.Tensor) -> dict[str, tf.Tensor]:
        raise NotImplementedError

    def _load_batch(
        self, row: dict[str, tf.Tensor], *, for_service: bool = False
    ) -> dict[str, tf.Tensor]:
        raise NotImplementedError
