"""The base of every Beam job as one transform: the pipeline's root in, the summary out.

The pairs and audio jobs (`MaterializePairs`, `MaterializeAudio`) and IndexExamples' job
(`IndexRecords`) are each one `Job`: `stages.run_job` applies it to the pipeline it claims the
output folder for, and commits the summary it returns.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import apache_beam as beam

# The job's config (`PairsConfig`, `AudioConfig`, `IndexConfig`).
ConfigT = TypeVar("ConfigT")


class Job(beam.PTransform, Generic[ConfigT]):
    """A whole job as one transform; a subclass builds it in `_build`.

    Args:
        config: the job's config; the job writes under its `output_dir`.

    Returns (of `expand`):
        A singleton PCollection, the summary (the content of `summary.json`).

    Example:
        class MaterializePairs(stages.Job[PairsConfig]):
            def _build(self, begin, config): ...

        stages.run_job(lambda p: p | MaterializePairs(config), config.output_dir, False, (), None)
    """

    def __init__(self, config: ConfigT):
        super().__init__()
        self._config = config

    def expand(self, begin: beam.pvalue.PBegin) -> beam.PCollection:
        """Builds the job on the pipeline's root.

        Args:
            begin: the pipeline's root.

        Returns:
            A singleton PCollection, the summary.
        """
        return self._build(begin, self._config)

    def _build(self, begin: beam.pvalue.PBegin, config: ConfigT) -> beam.PCollection:
        """The job's stages from `begin` to the summary; each job defines its own.

        Args:
            begin: the pipeline's root.
            config: the job's config.

        Returns:
            A singleton PCollection, the summary.
        """
        raise NotImplementedError(f"{type(self).__name__} defines no _build")
