"""The epoch plans in NumPy alone: the same record numbers as the TensorFlow plans, bit for bit.

The samplers' plans (`tfx_dynamic_inputs.inputs`) run as TensorFlow ops inside tf.data. This
package is the same plan algorithm executed by NumPy, for input pipelines without TensorFlow
(Grain datasets for Keras 3 on JAX or PyTorch): nothing here imports TensorFlow. Where the two
share a definition (the hash's constants and round counts, the salts) it is stated here and the
TensorFlow modules take it from here; tests/inputs/test_numpy_plans.py compares the record
numbers of both over generated sizes, seeds, epochs and batches.

* `seed_folds`: the stateless seeds of a plan's streams, `(seed, epoch, salt)`, and the mix's
  scalar draws (TensorFlow's Philox `stateless_fold_in` and `stateless_uniform`, reproduced);
* `keyed_hash`: the keyed hash and the keyed draws made of it;
* `keyed_permutation`: any position of a keyed permutation of `[0, size)` in O(1);
* `worker_slices`: how an epoch's batches are counted and split over workers;
* `pair_plan`: the dynamic-pairs plan (`uniform`, `least_sampled`, over CSR or groups);
  `pair_edges`: groups as edges and several runs' pair indexes as one (the mixed pairs);
* `run_mix`: a mix's checks (names, weights, weighting, runs named twice, one sample rate) and
  `FolderMix`, a mix of run folders;
* `class_report`, `class_geometry`, `class_plan`, `class_fillers`: which classes a plan uses,
  the class-balanced plan's units and rounds, its batches, and the classes that complete its
  short batches; `mix_plan`: the class-balanced plan over several runs mixed by weight;
* `arguments`: the argument checks the plans (and the TensorFlow samplers) make;
* `audio_options`, `filterbank`, `audio_front`: the audio front end's options, its constants (the
  STFT window and the mel filterbank, which the graph front end takes from here) and the front
  end (crop or pad, log-mel, mean normalization, SpecAugment) with the graph's keyed draws;
* `augment_options`, `clip_levels`, `clip_sets`, `speed_filter`, `speaker_front`: the speaker
  augmentation's options, the silence floor and direct-path peak, a run's noise or RIR clips,
  the speed filter, and the augmentation (speed, reverberation, noise) with the graph's draws
  (tests/core/test_audio_front.py, tests/class_balanced/test_speaker_front.py); `speed_classes`:
  the `K x C` derived classes speed perturbation plans over.
"""
