"""Benchmark: the demo models' training step and EER scoring vs the usual way to write them.

1. **CycleGAN train step** on 32x32x1 pair batches of 64 (the digit domains' shape), same
   network sizes on both sides:
   * baseline: the step as the TensorFlow CycleGAN tutorial writes it: each generator and
     discriminator called once per input (6 generator and 4 discriminator calls), instance
     norm with a learned scale and offset, convolutions with biases;
   * ours: `tfx_dynamic_inputs.models.cyclegan.CycleGAN`: inputs of the same network stacked
     along the batch axis (4 and 2 calls), affine-free instance norm after bias-free
     convolutions (as in the reference PyTorch implementation).
   Reported: the first step (trace + graph optimization + run; CPU seconds, since the machine
   may be shared) and the steady-state images/s (wall), medians of `--repeats`.
2. **EER scoring** of all pairs of N utterances (N(N-1)/2 trials; 4,000 utterances = 8M trials):
   * baseline: scikit-learn's `roc_curve` + nearest crossing, as voxceleb_trainer's
     `tuneThresholdfromScore` does;
   * ours: `tfx_dynamic_inputs.models.verification.equal_error_rate` (exact crossing).
   Reported: seconds (median) and the two EER values.

Prints ratios and a JSON result (also written to `--output`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import keras
import numpy as np
import tensorflow as tf
from json_report import write_report

from tfx_dynamic_inputs.models import cyclegan
from tfx_dynamic_inputs.models.verification import equal_error_rate

IMAGE_SHAPE = (32, 32, 1)
BATCH_SIZE = 64


# ------------------------------------------------------------------------ CycleGAN baseline


def _affine_norm(name):
    return keras.layers.GroupNormalization(groups=-1, epsilon=1e-5, name=name)


def tutorial_generator(image_shape, filters=8, num_downsamplings=2, num_residual_blocks=2):
    """`cyclegan_networks.build_generator`'s topology, with affine norms and biased convs."""
    inputs = keras.Input(shape=image_shape)
    h = keras.layers.Conv2D(filters, 5, padding="same")(inputs)
    h = keras.layers.ReLU()(_affine_norm(None)(h))
    widths = [filters * 2**level for level in range(num_downsamplings + 1)]
    for level in range(1, num_downsamplings + 1):
        h = keras.layers.Conv2D(widths[level], 3, strides=2, padding="same")(h)
        h = keras.layers.ReLU()(_affine_norm(None)(h))
    for _ in range(num_residual_blocks):
        r = keras.layers.Conv2D(widths[-1], 3, padding="same")(h)
        r = keras.layers.ReLU()(_affine_norm(None)(r))
        r = keras.layers.Conv2D(widths[-1], 3, padding="same")(r)
        h = keras.layers.Add()([h, _affine_norm(None)(r)])
    for level in range(num_downsamplings - 1, -1, -1):
        h = keras.layers.UpSampling2D(2)(h)
        h = keras.layers.Conv2D(widths[level], 3, padding="same")(h)
        h = keras.layers.ReLU()(_affine_norm(None)(h))
    outputs = keras.layers.Conv2D(image_shape[-1], 3, padding="same", activation="sigmoid")(h)
    return keras.Model(inputs, outputs)


def tutorial_discriminator(image_shape, filters=16):
    inputs = keras.Input(shape=image_shape)
    h = keras.layers.LeakyReLU(0.2)(keras.layers.Conv2D(filters, 4, 2, padding="same")(inputs))
    h = keras.layers.Conv2D(2 * filters, 4, 2, padding="same")(h)
    h = keras.layers.LeakyReLU(0.2)(_affine_norm(None)(h))
    h = keras.layers.Conv2D(4 * filters, 4, padding="same")(h)
    h = keras.layers.LeakyReLU(0.2)(_affine_norm(None)(h))
    return keras.Model(inputs, keras.layers.Conv2D(1, 4, padding="same")(h))


class TutorialCycleGAN(cyclegan.CycleGAN):
    """`CycleGAN` with the tutorial's networks and one call per network input."""

    def __init__(self, image_shape):
        super().__init__(image_shape)
        self.generator_xy = tutorial_generator(image_shape)
        self.generator_yx = tutorial_generator(image_shape)
        self.discriminator_x = tutorial_discriminator(image_shape)
        self.discriminator_y = tutorial_discriminator(image_shape)

    def _cyclegan_losses(self, x, y, training):
        fake_y = self.generator_xy(x, training=training)
        cycled_x = self.generator_yx(fake_y, training=training)
        fake_x = self.generator_yx(y, training=training)
        cycled_y = self.generator_xy(fake_x, training=training)
        same_x = self.generator_yx(x, training=training)
        same_y = self.generator_xy(y, training=training)
        real_x_scores = self.discriminator_x(x, training=training)
        real_y_scores = self.discriminator_y(y, training=training)
        fake_x_scores = self.discriminator_x(fake_x, training=training)
        fake_y_scores = self.discriminator_y(fake_y, training=training)
        losses = {
            "cycle_loss": cyclegan.mean_absolute_error(x, cycled_x)
            + cyclegan.mean_absolute_error(y, cycled_y),
            "identity_loss": cyclegan.mean_absolute_error(y, same_y)
            + cyclegan.mean_absolute_error(x, same_x),
            "generator_adv_loss": cyclegan.lsgan_generator_loss(fake_y_scores)
            + cyclegan.lsgan_generator_loss(fake_x_scores),
            "discriminator_loss": cyclegan.lsgan_discriminator_loss(real_x_scores, fake_x_scores)
            + cyclegan.lsgan_discriminator_loss(real_y_scores, fake_y_scores),
        }
        losses["generator_loss"] = (
            losses["generator_adv_loss"]
            + self.cycle_weight * losses["cycle_loss"]
            + self.identity_weight * losses["identity_loss"]
        )
        return losses


def time_cyclegan(model_class, steps: int) -> dict[str, float]:
    keras.utils.set_random_seed(0)
    model = model_class(IMAGE_SHAPE)
    model.compile(jit_compile=False)
    batch = {
        "x": tf.random.uniform([BATCH_SIZE, *IMAGE_SHAPE]),
        "y": tf.random.uniform([BATCH_SIZE, *IMAGE_SHAPE]),
    }
    step = tf.function(model.train_step)
    cpu = time.process_time()
    step(batch)["cycle_loss"].numpy()
    first_step_cpu_s = time.process_time() - cpu
    start = time.perf_counter()
    for _ in range(steps):
        losses = step(batch)
    losses["cycle_loss"].numpy()
    seconds = time.perf_counter() - start
    return {
        "first_step_cpu_s": first_step_cpu_s,
        "images_per_s": steps * BATCH_SIZE / seconds,
        "trained_variables": float(
            len(model.generator_variables) + len(model.discriminator_variables)
        ),
    }


# ------------------------------------------------------------------------ EER baseline


def sklearn_eer(scores: np.ndarray, same: np.ndarray) -> float:
    """voxceleb_trainer's `tuneThresholdfromScore`: the ROC point nearest the crossing."""
    from sklearn.metrics import roc_curve

    fpr, tpr, _ = roc_curve(same, scores, pos_label=1)
    fnr = 1 - tpr
    nearest = np.nanargmin(np.absolute(fnr - fpr))
    return float(max(fpr[nearest], fnr[nearest]))


def all_pair_trials(num_utterances: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Cosine scores and same-speaker flags of all pairs of synthetic embeddings."""
    rng = np.random.default_rng(seed)
    speakers = rng.integers(0, max(2, num_utterances // 10), num_utterances)
    centres = rng.normal(size=(speakers.max() + 1, 64))
    embeddings = centres[speakers] + 1.5 * rng.normal(size=(num_utterances, 64))
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    first, second = np.triu_indices(num_utterances, k=1)
    scores = np.einsum("nd,nd->n", embeddings[first], embeddings[second]).astype(np.float32)
    return scores, speakers[first] == speakers[second]


def time_call(function, repeats: int) -> tuple[float, object]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        value = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--output", default=os.path.join(os.path.dirname(__file__), "results", "models.json")
    )
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 3)
    steps = 10 if args.quick else 40
    num_utterances = 1500 if args.quick else 4000

    result: dict = {"quick": args.quick, "repeats": repeats}
    cyclegan_runs = {
        name: [time_cyclegan(model_class, steps) for _ in range(repeats)]
        for name, model_class in (
            ("baseline_tutorial_step", TutorialCycleGAN),
            ("ours", cyclegan.CycleGAN),
        )
    }
    for name, runs in cyclegan_runs.items():
        result[f"cyclegan_{name}"] = {
            key: statistics.median(run[key] for run in runs) for key in runs[0]
        }
    ours, baseline = result["cyclegan_ours"], result["cyclegan_baseline_tutorial_step"]
    result["cyclegan_first_step_speedup"] = baseline["first_step_cpu_s"] / ours["first_step_cpu_s"]
    result["cyclegan_throughput_ratio"] = ours["images_per_s"] / baseline["images_per_s"]

    scores, same = all_pair_trials(num_utterances, seed=0)
    baseline_s, baseline_eer = time_call(lambda: sklearn_eer(scores, same), repeats)
    ours_s, ours_eer = time_call(lambda: equal_error_rate(scores, same), repeats)
    result["eer"] = {
        "num_trials": int(scores.size),
        "baseline_sklearn_s": baseline_s,
        "ours_s": ours_s,
        "speedup": baseline_s / ours_s,
        "baseline_eer": baseline_eer,
        "ours_eer": ours_eer,
    }

    print(
        f"CycleGAN step ({BATCH_SIZE} x {IMAGE_SHAPE}): first step "
        f"{baseline['first_step_cpu_s']:.1f} -> {ours['first_step_cpu_s']:.1f} CPU s "
        f"({result['cyclegan_first_step_speedup']:.2f}x), steady "
        f"{baseline['images_per_s']:.0f} -> {ours['images_per_s']:.0f} images/s "
        f"({result['cyclegan_throughput_ratio']:.2f}x)"
    )
    eer = result["eer"]
    print(
        f"EER of {eer['num_trials']:,} trials: sklearn roc_curve {eer['baseline_sklearn_s']:.2f} s"
        f" -> ours {eer['ours_s']:.2f} s ({eer['speedup']:.2f}x); EER "
        f"{eer['baseline_eer']:.5f} vs {eer['ours_eer']:.5f}"
    )
    write_report(args.output, result, sort_keys=True)


if __name__ == "__main__":
    main()
