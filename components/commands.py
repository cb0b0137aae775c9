"""`tfx-dynamic-inputs`, the installed command: one entry point over the project's command lines.

    tfx-dynamic-inputs COMMAND [FLAGS ...]     # FLAGS are COMMAND's own: COMMAND --help
    tfx-dynamic-inputs --help | --version

Each command is a module's `main` that also runs as `python -m MODULE`: the command hands the
rest of the line to it unchanged, so flags, help, errors and exit statuses are that module's.
Its module is imported only once the command is known: `--help` and a mistyped command answer
at once, without TensorFlow, and a command whose extra is not installed is one line naming the
`pip install` that brings it (exit status 2).

Every default output of these commands is below the folder they run in
(`tfx-dynamic-inputs-out/`: `config.OUTPUT_DIR`), never in the installation.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import sys
from importlib import metadata

from tfx_dynamic_inputs.extras import DISTRIBUTION, MissingExtraError

PROGRAM = "tfx-dynamic-inputs"


@dataclasses.dataclass(frozen=True)
class Command:
    """One command of `PROGRAM`.

    Args:
      module: the module whose `main(argv)` runs it (also `python -m module`).
      summary: one line for `PROGRAM --help`.
    """

    module: str
    summary: str


COMMANDS: dict[str, Command] = {
    "materialize": Command(
        "tfx_dynamic_inputs.materialize.__main__",
        "the Beam jobs: image pairs or audio files -> an indexed run [beam]",
    ),
    "run-local": Command(
        "tfx_dynamic_inputs.pipeline.run_local",
        "run the cyclegan or speaker pipeline locally, with ML Metadata [tfx]",
    ),
    "demo": Command(
        "tfx_dynamic_inputs.pipeline.demo",
        "both pipelines on the bundled sample data, then what they produced [tfx]",
    ),
    "kubeflow": Command(
        "tfx_dynamic_inputs.kubeflow.runner",
        "compile both pipelines for Kubeflow Pipelines and Vertex AI [kubeflow]",
    ),
    "kubeflow-local-run": Command(
        "tfx_dynamic_inputs.kubeflow.local_run",
        "run a compiled pipeline spec here, task by task [kubeflow]",
    ),
    "image-tasks": Command(
        "tfx_dynamic_inputs.kubeflow.image_tasks",
        "run every compiled task of both demos in the task image (podman) [kubeflow]",
    ),
    "data-service-worker": Command(
        "tfx_dynamic_inputs.data_service_worker",
        "a tf.data service worker that can run the samplers' datasets",
    ),
    "native": Command(
        "tfx_dynamic_inputs.native.__main__",
        "build (or check) the disk backend's native read op",
    ),
}


def usage() -> str:
    """`PROGRAM --help`: the commands, each with its summary."""
    width = max(map(len, COMMANDS))
    lines = [
        f"usage: {PROGRAM} COMMAND [FLAGS ...]   ({PROGRAM} COMMAND --help for its flags)",
        "",
        "commands (the extra each needs in brackets: pip install 'tfx-dynamic-inputs[EXTRA]'):",
        *(f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()),
        "",
        "Default outputs go below the current folder (tfx-dynamic-inputs-out/).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs the command `argv` names with the rest of `argv`.

    Args:
      argv: the command and its flags; None reads `sys.argv[1:]`.

    Returns:
      The command's exit status (0 where its `main` returns None); 2 for a missing or unknown
      command, or a command whose extra is not installed (one line on stderr).

    Example:
      main(["materialize", "pairs", "--help"])
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"{PROGRAM} {metadata.version(DISTRIBUTION)}")
        return 0
    name, flags = argv[0], argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(
            f"{PROGRAM}: error: unknown command {name!r}{hint}; commands: {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    try:
        module = importlib.import_module(command.module)
    except MissingExtraError as error:
        print(f"{PROGRAM} {name}: error: {error}", file=sys.stderr)
        return 2
    # The commands' parsers name themselves after sys.argv[0] (argparse's default `prog`).
    sys.argv[0] = f"{PROGRAM} {name}"
    status = module.main(flags)
    return 0 if status is None else status


if __name__ == "__main__":
    sys.exit(main())
