# The task image with a user's own modules on its PYTHONPATH: Transform's `preprocessing_fn`, a
# trainer module (the standard-TFX composition's `preprocessing_fn` and `trainer_module`,
# tfx_dynamic_inputs.pipeline.standard_pipeline), anything a task imports by name. The build
# context is the modules' folder, which becomes /app/user_modules:
#
#   podman build -f kubeflow/user-modules.Dockerfile --build-arg IMAGE=tfx-dynamic-inputs:local \
#       -t REGISTRY/my-tasks:TAG my_modules/
#
# `my_modules/my_trainer.py` is then `trainer_module="my_trainer"` and `my_modules/acme/prep.py`
# `preprocessing_fn="acme.prep.preprocessing_fn"`; compile the pipeline for this image
# (`compile_pipeline(..., image="REGISTRY/my-tasks:TAG")`). tests/kubeflow/test_image_tasks.py
# builds one so and runs the standard pipeline's compiled tasks in it.

ARG IMAGE=tfx-dynamic-inputs:latest
FROM ${IMAGE}

# Owned by root and read-only for the task, as the rest of /app.
COPY . /app/user_modules/
ENV PYTHONPATH=/app/user_modules
