"""A committed run's records read without TensorFlow."""
