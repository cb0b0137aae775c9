"""The SDK container boot of the remote-worker test: what Beam's own boot (`/opt/apache/beam/boot`,
Go) does for a worker, in Python, for a worker pool started with `--container_executable`.

    python -S remote_worker_boot.py --id=ID --provision_endpoint=HOST:PORT
        --artifact_endpoint=HOST:PORT --logging_endpoint=HOST:PORT --control_endpoint=HOST:PORT

Beam 2.59's worker pool (`worker_pool_main`) hands every worker it starts to this executable. It
asks the provision service for the job's pipeline options and dependencies, fetches each staged
file through the artifact retrieval service, installs the packages `extra_packages.txt` names
(without dependencies: the worker environment must have them, as Beam's SDK image has Beam's)
into the worker's own folder, and replaces itself with the SDK harness, that folder first on its
path. The interpreter runs with `-S` and a PYTHONPATH of dependencies only, from the worker's
folder: the project is importable there only if it was staged. BOOT_WORK_DIR is where each
worker gets its folder.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import grpc
from apache_beam.portability import common_urns
from apache_beam.portability.api import (
    beam_artifact_api_pb2,
    beam_artifact_api_pb2_grpc,
    beam_provision_api_pb2,
    beam_provision_api_pb2_grpc,
    beam_runner_api_pb2,
    endpoints_pb2,
)
from apache_beam.utils import proto_utils
from google.protobuf import json_format, text_format

EXTRA_PACKAGES_FILE = "extra_packages.txt"  # as Beam's stager writes it
SITE_DIR = "site"
_RPC_TIMEOUT_S = 60
_PIP_TIMEOUT_S = 120


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    for endpoint in ("provision", "artifact", "logging", "control"):
        parser.add_argument(f"--{endpoint}_endpoint", required=True)
    parser.add_argument("--id", required=True)
    args = parser.parse_args(argv)
    work_dir = tempfile.mkdtemp(prefix=f"{args.id}-", dir=os.environ["BOOT_WORK_DIR"])
    staged_dir = os.path.join(work_dir, "staged")
    os.mkdir(staged_dir)
    # The runner's services find the worker by this header (BasicProvisionService).
    header = [("worker_id", args.id)]

    provision = beam_provision_api_pb2_grpc.ProvisionServiceStub(
        grpc.insecure_channel(args.provision_endpoint)
    )
    info = provision.GetProvisionInfo(
        beam_provision_api_pb2.GetProvisionInfoRequest(), metadata=header, timeout=_RPC_TIMEOUT_S
    ).info
    retrieval = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(
        grpc.insecure_channel(args.artifact_endpoint)
    )
    resolved = retrieval.ResolveArtifacts(
        beam_artifact_api_pb2.ResolveArtifactsRequest(artifacts=info.dependencies),
        metadata=header,
        timeout=_RPC_TIMEOUT_S,
    ).replacements
    for artifact in resolved:
        assert artifact.role_urn == common_urns.artifact_roles.STAGING_TO.urn, artifact
        name = proto_utils.parse_Bytes(
            artifact.role_payload, beam_runner_api_pb2.ArtifactStagingToRolePayload
        ).staged_name
        with open(os.path.join(staged_dir, name), "wb") as f:
            request = beam_artifact_api_pb2.GetArtifactRequest(artifact=artifact)
            for chunk in retrieval.GetArtifact(request, metadata=header, timeout=_RPC_TIMEOUT_S):
                f.write(chunk.data)

    site_dir = os.path.join(work_dir, SITE_DIR)
    extra_packages = os.path.join(staged_dir, EXTRA_PACKAGES_FILE)
    if os.path.exists(extra_packages):
        with open(extra_packages) as f:
            packages = [os.path.join(staged_dir, line.strip()) for line in f if line.strip()]
        # stdout is a pipe the worker pool never reads: pip reports on stderr.
        subprocess.run(
            [sys.executable, "-S", "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
            + ["--disable-pip-version-check", "--target", site_dir, *packages],
            stdout=sys.stderr,
            check=True,
            timeout=_PIP_TIMEOUT_S,
        )

    def descriptor(url: str) -> str:
        return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))

    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([site_dir, os.environ["PYTHONPATH"]]),
        "WORKER_ID": args.id,
        "PIPELINE_OPTIONS": json_format.MessageToJson(info.pipeline_options),
        "SEMI_PERSISTENT_DIRECTORY": work_dir,
        "LOGGING_API_SERVICE_DESCRIPTOR": descriptor(args.logging_endpoint),
        "CONTROL_API_SERVICE_DESCRIPTOR": descriptor(args.control_endpoint),
        "RUNNER_CAPABILITIES": " ".join(info.runner_capabilities),
    }
    # The harness imports from its working directory first (`-m`): not the project's checkout.
    os.chdir(work_dir)
    harness = "apache_beam.runners.worker.sdk_worker_main"
    os.execve(sys.executable, [sys.executable, "-S", "-m", harness], environment)


if __name__ == "__main__":
    main(sys.argv[1:])
