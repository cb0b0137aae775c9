"""One TFX execution as this project's executors read it, and the `Do` they share.

TFX calls `Do(input_dict, output_dict, exec_properties)` with three dicts; every executor here
logs them (as TFX's own executors do) and then reads single artifacts out of them by key. The
shared `LoggedExecutor.Do` does the first once and hands the executor an `Execution`, which
does the second.

Example:

    class Executor(execution.LoggedExecutor):
        def execute(self, run: execution.Execution) -> None:
            model = run.input(keys.MODEL_KEY)
            blessing = run.output(keys.BLESSING_KEY)
            ...
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils


@dataclasses.dataclass(frozen=True)
class Execution:
    """The artifacts and properties TFX hands one execution.

    Attributes:
      inputs: input key -> the artifacts of that channel (an optional channel: absent or empty).
      outputs: output key -> the artifacts to write (an optional output: absent or empty).
      properties: the execution parameters, by key (an unset optional one: absent or None).
    """

    inputs: dict[str, list[types.Artifact]]
    outputs: dict[str, list[types.Artifact]]
    properties: dict[str, Any]

    def input(self, key: str) -> types.Artifact:
        """The one artifact of input `key`.

        Raises:
          KeyError: the execution has no input `key`.
          ValueError: the input does not hold exactly one artifact.

        Args:
          key: the input's key, e.g. `component_keys.MODEL_KEY`.

        Returns:
          The artifact.
        """
        return artifact_utils.get_single_instance(self.inputs[key])

    def optional_input(self, key: str) -> types.Artifact | None:
        """The one artifact of input `key`, or None where the channel is absent or empty.

        Args:
          key: the input's key.

        Returns:
          The artifact, or None.

        Raises:
          ValueError: the channel holds more than one artifact.
        """
        return self.input(key) if self.inputs.get(key) else None

    def output(self, key: str) -> types.Artifact:
        """The one artifact of output `key` (raises as `input` does).

        Args:
          key: the output's key, e.g. `component_keys.BLESSING_KEY`.

        Returns:
          The artifact to write.
        """
        return artifact_utils.get_single_instance(self.outputs[key])

    def optional_output(self, key: str) -> types.Artifact | None:
        """The one artifact of output `key`, or None where the component does not produce it
        (raises as `optional_input` does).

        Args:
          key: the output's key.
        """
        return self.output(key) if self.outputs.get(key) else None


class LoggedExecutor(base_executor.BaseExecutor):
    """Base of this project's executors: `Do` logs the execution, then calls `execute`.

    Put it first among the bases of an executor with another TFX base (a Beam executor:
    `class Executor(LoggedExecutor, base_beam_executor.BaseBeamExecutor)`), so that its `Do` is
    the one TFX calls.
    """

    def execute(self, run: Execution) -> None:
        """Runs the component on `run`'s artifacts and properties; the subclass's work.

        Args:
          run: the execution's inputs, outputs and properties.

        Raises:
          NotImplementedError: unless a subclass overrides it.
        """
        raise NotImplementedError

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        """TFX's entry point: logs the three dicts and runs `execute` on them.

        Args:
          input_dict: input key -> artifacts.
          output_dict: output key -> artifacts to write.
          exec_properties: the execution parameters.
        """
        self._log_startup(input_dict, output_dict, exec_properties)
        self.execute(Execution(input_dict, output_dict, exec_properties))
