"""Local multi-process runs of the jobs with a lean Beam SDK worker.

The DirectRunner's `multi_processing` mode starts every worker as
`python -m apache_beam.runners.worker.sdk_worker_main`. That worker imports each optional Beam
IO whose client library is installed: BigQuery and Pub/Sub alone pull in IPython, pandas and
about 700 more modules (0.5-1 s per worker). At exit it spends 0.5-0.8 s finalizing its ~2,400
modules, and the runner waits for the workers one after another. The jobs here read and write
files only, so `local_pipeline` runs the same FnApiRunner with this module as the worker
command: it hides those two clients (Beam skips an IO whose client raises ImportError) and
pandas (Beam's typehints add their pandas types only where it imports; the jobs' transforms use
none: a worker's Beam import 1.46 -> 1.08 s, a two-worker job's start-up 2.5-2.9 -> 2.35 s on 2
cores), and leaves with `os._exit` once the harness has finished.

    python -m tfx_dynamic_inputs.materialize.beam_worker <sdk_worker_main arguments>

Beam is imported inside the functions: the worker must hide the clients before its first Beam
import, and the launcher, which imports this module too, must not hide them.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

_UNUSED_CLIENTS = (
    "google.cloud.bigquery",
    "google.cloud.bigquery_storage_v1",
    "google.cloud.pubsub",
    "google.cloud.pubsub_v1",
    "pandas",
)
_DIRECT_RUNNERS = (None, "DirectRunner", "SwitchingDirectRunner")


def local_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """A pipeline for `options`; DirectRunner multi_processing runs get the lean workers.

    Args:
        options: the pipeline's options.

    Returns:
        The `beam.Pipeline`.
    """
    import apache_beam as beam
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner
    if (
        runner in _DIRECT_RUNNERS
        and options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    ):
        return beam.Pipeline(runner=_lean_workers_runner(options), options=options)
    return beam.Pipeline(options=options)


def _lean_workers_runner(options: PipelineOptions):
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    from apache_beam.transforms import environments

    class LeanWorkersRunner(fn_runner.FnApiRunner):
        """FnApiRunner whose worker command is this module.

        In multi_processing mode `run_pipeline` overwrites the default environment with Beam's
        own worker command; the property keeps ours.
        """

        @property
        def _default_environment(self):
            return environments.SubprocessSDKEnvironment.from_command_string(
                f"{sys.executable} -m {__name__}"
            )

        @_default_environment.setter
        def _default_environment(self, _):
            pass

    # As the DirectRunner does: workers read the pipeline options from the provision info.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision_info = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return LeanWorkersRunner(provision_info=provision_info)


def main(argv: list[str]) -> None:
    """Runs a Beam SDK worker (the command of the lean workers), then exits the process.

    Args:
        argv: the worker's command line, as `sys.argv`.
    """
    for name in _UNUSED_CLIENTS:
        sys.modules.setdefault(name, None)
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(argv)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
