"""Keras 3 models trained by the demo pipelines: a CycleGAN and a speaker-embedding net,
`serving`, their SavedModel exports (signatures that run the training front end in the graph),
`transform_serving`, the export of any Keras model trained on Transform's features (raw
Examples in, and the `transform_features` signature TFMA uses),
and `charts`, the numpy-drawn charts of their TensorBoard pictures.

The CycleGAN is three modules: `cyclegan_networks` (generator, discriminator), `cyclegan` (the
`CycleGAN` model and its losses) and `translation_snapshots` (its TensorBoard pictures).

Pure Keras (TensorFlow backend): importing these modules does not import TFX.
"""
