"""User modules for the custom trainer component: each defines `run_fn(fn_args) -> dict`.

A module receives ready-made inputs in `fn_args` (duck-typed, built by the trainer executor):
`train_dataset`, `eval_dataset` (or None), `callbacks`, `num_epochs`, `serving_model_dir`,
`model_run_dir` and `custom_config`. It trains, exports a SavedModel to `serving_model_dir` and
returns its final metrics as floats. These modules do not import TFX.
"""
