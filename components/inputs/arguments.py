"""Argument checks of the public constructors (one-line errors naming the argument): stated in
`plans.arguments`, which needs NumPy alone, and named here for the TensorFlow samplers."""

from __future__ import annotations

from tfx_dynamic_inputs.plans import arguments

SEED_RANGE = arguments.SEED_RANGE
int_argument = arguments.int_argument
seed_argument = arguments.seed_argument
choice = arguments.choice
