"""Trainer user module: a CycleGAN on dynamic-pair batches.

`fn_args.train_dataset` yields `{"x": float32 [B, H, W, C] in [0, 1], "y": same, "x_index":
int64 [B], "y_index": int64 [B]}` and is re-planned every time it is iterated, so each epoch of
`fit` sees fresh valid pairs. The executor's callbacks (pair coverage) go into `fit`, and what
they add to the epoch logs lands in the history and the returned metrics.

`custom_config` keys read here (others are left to the executor): `image_size` (checked
against the data), `learning_rate` (2e-4), `generator_filters`, `num_downsamplings`,
`num_residual_blocks`, `discriminator_filters`, `cycle_weight` (10), `identity_weight` (5),
`seed` (0).

TensorBoard, under `fn_args.model_run_dir`: the Keras scalars (`train/`, `validation/`) and,
every epoch, x -> y -> x and y -> x -> y translations of 4 fixed x and y
(`translations/`, see `TranslationSnapshots`). The fixed images come from the first batch of
`fn_args.eval_dataset` when there is one (held out), else from the first training batch: the
trainer component gives dynamic pairs no evaluation split, and every x is trained on each
epoch, so then they show how well the model fits, not how it generalizes.
"""

from __future__ import annotations

import logging

import keras

from tfx_dynamic_inputs.models.cyclegan import LOSS_NAMES, X_KEY, Y_KEY, CycleGAN
from tfx_dynamic_inputs.models.serving import export_cyclegan
from tfx_dynamic_inputs.models.translation_snapshots import TranslationSnapshots
from tfx_dynamic_inputs.trainer_modules import training_log

_MODEL_ARGS = (
    "generator_filters",
    "num_downsamplings",
    "num_residual_blocks",
    "discriminator_filters",
    "cycle_weight",
    "identity_weight",
)


def _image_shape(fn_args, config: dict) -> tuple[int, int, int]:
    spec = fn_args.train_dataset.element_spec
    if not isinstance(spec, dict) or X_KEY not in spec or Y_KEY not in spec:
        raise ValueError(
            "the CycleGAN trainer needs pair batches {'x', 'y', ...}; train_dataset yields "
            f"{spec}"
        )
    x_shape, y_shape = spec[X_KEY].shape, spec[Y_KEY].shape
    if x_shape.rank != 4 or not x_shape[1:].is_fully_defined() or x_shape[1:] != y_shape[1:]:
        raise ValueError(
            f"'x' and 'y' must be [B, H, W, C] with the same known H, W, C; got {x_shape} and "
            f"{y_shape}"
        )
    image_shape = tuple(int(d) for d in x_shape[1:])
    image_size = config.get("image_size")
    if image_size is not None and image_shape[:2] != (int(image_size), int(image_size)):
        raise ValueError(
            f"custom_config image_size={image_size} but the batches hold {image_shape[:2]} images"
        )
    return image_shape


def run_fn(fn_args) -> dict[str, float]:
    """Trains the CycleGAN, exports both generators (`serving.export_cyclegan`: each way on uint8
    pixels, PNG/JPEG files or training-size floats), returns the final losses and coverage.

    Returns the last epoch's logs (`cycle_loss`, `identity_loss`, `generator_adv_loss`,
    `discriminator_loss`, any `val_*` and whatever the callbacks logged) plus
    `cycle_loss_first_epoch`, `cycle_loss_last_epoch` and `epochs`.

    Args:
        fn_args: the trainer's `FnArgs`: `train_dataset` (pair batches, dicts with "x" and "y"
            [B, H, W, C] of the same known H, W, C), optionally `eval_dataset`, `num_epochs`,
            `serving_model_dir`, `model_run_dir`, `custom_config` (model and optimizer
            settings; `image_size` must match the batches when given).

    Returns:
        Metric name -> float, as above.

    Raises:
        ValueError: when `fn_args` lacks a required attribute, or the batches are not pairs of
            the shape above.
        RuntimeError: when training diverged.
    """
    training_log.check_common_args(fn_args)
    config = dict(fn_args.custom_config or {})
    image_shape = _image_shape(fn_args, config)
    keras.utils.set_random_seed(int(config.get("seed", 0)))
    # Built here, both optimizers in `compile`, under the trainer's strategy: a resumed `fit`
    # restores into them at its start.
    learning_rate = float(config.get("learning_rate", 2e-4))
    with training_log.strategy_of(fn_args).scope():
        model = CycleGAN(image_shape, **{k: config[k] for k in _MODEL_ARGS if k in config})
        model.compile(
            generator_optimizer=keras.optimizers.Adam(learning_rate, beta_1=0.5),
            discriminator_optimizer=keras.optimizers.Adam(learning_rate, beta_1=0.5),
            # Measured on CPU: XLA made 3 epochs of this four-network step 3x slower.
            jit_compile=False,
        )
    train_dataset = fn_args.train_dataset
    eval_dataset = getattr(fn_args, "eval_dataset", None)
    held_out = eval_dataset is not None
    snapshots = TranslationSnapshots(
        fn_args.model_run_dir,
        image_shape,
        images_from="the first evaluation batch (held out from training)"
        if held_out
        else "the first training batch (trained on: there is no evaluation data)",
    )
    if held_out:
        eval_dataset = snapshots.watch(eval_dataset)
    else:
        train_dataset = snapshots.watch(train_dataset)
    history, metrics = training_log.fit_and_log(
        model,
        fn_args,
        LOSS_NAMES,
        validation_data=eval_dataset,
        train_dataset=train_dataset,
        callbacks=[snapshots],
    )
    export_cyclegan(model, fn_args.serving_model_dir)
    metrics.update(
        cycle_loss_first_epoch=float(history["cycle_loss"][0]),
        cycle_loss_last_epoch=float(history["cycle_loss"][-1]),
        epochs=float(len(history["cycle_loss"])),
    )
    logging.info("CycleGAN trained: %s", metrics)
    return metrics
