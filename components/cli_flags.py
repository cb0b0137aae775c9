"""The one flag grammar of the package's command lines, and their quiet default.

Every CLI (`python -m tfx_dynamic_inputs.materialize`, `...pipeline.run_local`,
`...kubeflow.runner`, `...data_service_worker`) parses its flags with `FlagParser`:

- a flag may be spelled with underscores or dashes (`--output_dir`, `--output-dir`): both name
  the flag as registered;
- a boolean flag (`action=BoolFlag`) is `--flag` (true), `--no-flag` (false) or
  `--flag true|false` (also yes/no, on/off, 1/0, and `--flag=false`);
- an int or float flag (`type=parse_int`, `type=parse_float`) refuses other text naming the
  flag: `--num_shards: expected an int, got 'abc'`;
- every error is one line (a `FlagError`; the command prints it and exits with status 2),
  never argparse's usage; an unknown flag names the closest known one ("did you mean");
- `--help` states each flag's default.

`quiet` silences, unless `--verbose` is given, what the libraries print that asks nothing of the
user: TensorFlow's C++ logs (CUDA plugins on a CPU host, CPU instructions), absl's warnings
(TensorFlow's and TFX's Python logs), Beam's note on python-snappy and Google's Python-version
notice. Our own warnings stay.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")
# The exit status of a bad command line.
EXIT_BAD_FLAGS = 2
VERBOSE_FLAG = "--verbose"
# Python warnings that ask nothing of a user of these commands: (category, message regex).
NO_ACTION_WARNINGS = (
    # google.api_core, imported with TFX and Beam: the Python version the venv pins.
    (FutureWarning, r"You are using a non-supported Python version"),
)
# Loggers whose warnings ask nothing of a user here; quiet leaves them their errors.
NO_ACTION_LOGGERS = (
    # A faster CRC32C for Beam's TFRecord sink, which the jobs do not write through.
    "apache_beam.io.tfrecordio",
)
# TensorFlow's C++ logs: 3 keeps none (the import's CUDA plugin "E" lines on a CPU host, the
# CPU-instruction and TensorRT notices); its errors reach Python as exceptions.
TF_CPP_QUIET_LEVEL = "3"
_ARGUMENT_PREFIX = re.compile(r"^argument (-[^\s:/]+)(?:/[^\s:]+)*: ")


class FlagError(ValueError):
    """A bad command line; the message is one line naming the flag or argument."""


def parse_bool(text: str) -> bool:
    """A boolean flag's value.

    Args:
        text: true/yes/on/1 or false/no/off/0, in any case.

    Returns:
        The bool.

    Raises:
        argparse.ArgumentTypeError: other text (the parser names the flag).
    """
    if text.lower() in TRUE_WORDS:
        return True
    if text.lower() in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected a bool (true/false), got {text!r}")


def parse_int(text: str) -> int:
    """An int flag's value (its `type`).

    Args:
        text: a decimal integer.

    Returns:
        The int.

    Raises:
        argparse.ArgumentTypeError: other text (the parser names the flag).
    """
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int, got {text!r}") from None


def parse_float(text: str) -> float:
    """A float flag's value (its `type`); its bounds (NaN included) are the option's own
    check.

    Args:
        text: a number.

    Returns:
        The float.

    Raises:
        argparse.ArgumentTypeError: other text (the parser names the flag).
    """
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a float, got {text!r}") from None


def negative(option: str) -> str:
    """The option that sets boolean flag `option` false: `--no_` before an underscored name,
    else `--no-` (either spelling is accepted)."""
    return f"--no{'_' if '_' in option else '-'}{option[2:]}"


class BoolFlag(argparse.Action):
    """A boolean flag: `--flag` or `--flag true|false` sets it, `--no-flag` sets it false."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        default: Any = False,
        required: bool = False,
        help: str | None = None,
        metavar: str | None = None,
    ) -> None:
        negatives = [negative(option) for option in option_strings if option.startswith("--")]
        super().__init__(
            [*option_strings, *negatives],
            dest,
            nargs="?",
            default=default,
            type=parse_bool,
            required=required,
            help=help,
            metavar=metavar or "BOOL",
        )
        self.negatives = frozenset(negatives)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if option_string in self.negatives:
            if values is not None:
                raise argparse.ArgumentError(self, f"{option_string} takes no value")
            setattr(namespace, self.dest, False)
        else:
            setattr(namespace, self.dest, True if values is None else values)


def _shown_default(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text.replace("%", "%%")  # argparse %-formats help texts


class HelpWithDefaults(argparse.HelpFormatter):
    """Help that states each flag's default (unless it has none or its text says it), and a
    boolean flag as `--flag [BOOL], --no-flag`."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            not action.option_strings
            or action.default is None
            or action.default is argparse.SUPPRESS
            or "default" in text
        ):
            return text
        default = f"default: {_shown_default(action.default)}"
        return f"{text} ({default})" if text else default

    def _format_action(self, action: argparse.Action) -> str:
        # argparse formats no help line for a flag without help: give it its default.
        if not action.help and self._get_help_string(action):
            action = copy.copy(action)
            action.help = self._get_help_string(action)
        return super()._format_action(action)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if isinstance(action, BoolFlag):
            positives = [o for o in action.option_strings if o not in action.negatives]
            return ", ".join([*(f"{o} [{action.metavar}]" for o in positives), *action.negatives])
        return super()._format_action_invocation(action)


def _key(option: str) -> str:
    """What spellings of one long option have in common: dashes read as underscores."""
    return "--" + option[2:].replace("-", "_")


class FlagParser(argparse.ArgumentParser):
    """An ArgumentParser of the package's grammar (see the module): dashes or underscores,
    boolean flags with `--no-`, one-line `FlagError`s with "did you mean", defaults in `--help`;
    its sub-command parsers are FlagParsers too."""

    def __init__(
        self,
        prog: str | None = None,
        description: str | None = None,
        epilog: str | None = None,
        formatter_class: type[argparse.HelpFormatter] = HelpWithDefaults,
        allow_abbrev: bool = False,
    ) -> None:
        super().__init__(
            prog=prog,
            description=description,
            epilog=epilog,
            formatter_class=formatter_class,
            allow_abbrev=allow_abbrev,
        )

    def add_verbose_flag(self) -> None:
        """Adds `--verbose`: show the libraries' logs and warnings that `quiet` hides."""
        self.add_argument(
            VERBOSE_FLAG,
            action=BoolFlag,
            help="show TensorFlow's C++ logs, absl's and the libraries' notices that ask "
            "nothing of you (hidden by default)",
        )

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """`ArgumentParser.parse_known_args` of `args` with each flag's spelling normalized.

        Args:
            args: the arguments without the program name; None reads `sys.argv`.
            namespace: the namespace to fill (None: a new one).

        Returns:
            The namespace and the arguments no flag took.

        Raises:
            FlagError: a bad value, a missing value or required flag (one line).
        """
        argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._normalized(argv), namespace)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """`parse_known_args`, where an argument no flag took is a `FlagError`.

        Args:
            args: the arguments without the program name; None reads `sys.argv`.
            namespace: the namespace to fill (None: a new one).

        Returns:
            The namespace.

        Raises:
            FlagError: an unknown flag (naming the closest known one) or a bad value.
        """
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            raise self.unknown_argument(unknown[0], parsed)
        return parsed

    def unknown_argument(self, argument: str, parsed: argparse.Namespace) -> FlagError:
        """The error for an `argument` no flag takes: an unknown flag names the closest flag of
        this parser and of the sub-command `parsed` chose.

        Args:
            argument: the argument, e.g. "--x_dirr=x" or "stray".
            parsed: what was parsed (it names the sub-command).

        Returns:
            The FlagError, e.g. "unknown flag --x_dirr (did you mean --x_dir?)".
        """
        if not argument.startswith("-"):
            return FlagError(f"unexpected argument {argument!r}")
        name = argument.split("=")[0]
        known = {_key(option): option for option in self._long_options(parsed)}
        close = difflib.get_close_matches(_key(name)[2:], [key[2:] for key in known], n=1)
        hint = f" (did you mean {known['--' + close[0]]}?)" if close else ""
        return FlagError(f"unknown flag {name}{hint}")

    def error(self, message: str) -> NoReturn:
        """Raises argparse's `message` as a one-line FlagError, "argument --flag: ..." said as
        "--flag: ..."."""
        message = _ARGUMENT_PREFIX.sub(r"\1: ", message)
        raise FlagError(message.replace("expected one argument", "expected a value"))

    def _long_options(self, parsed: argparse.Namespace | None = None) -> Iterator[str]:
        """The long options of this parser and of the sub-command `parsed` chose (None: of
        every sub-command)."""
        for action in self._actions:
            yield from (option for option in action.option_strings if option.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                chosen = getattr(parsed, action.dest, None) if parsed is not None else None
                for name, sub in action.choices.items():
                    if isinstance(sub, FlagParser) and chosen in (None, name):
                        yield from sub._long_options(None)

    def _normalized(self, argv: list[str]) -> list[str]:
        """`argv` with each known long flag spelled as registered (up to a `--`)."""
        spellings: dict[str, str] = {}
        for option in self._long_options():
            spellings.setdefault(_key(option), option)
        normalized = []
        for index, argument in enumerate(argv):
            if argument == "--":
                return normalized + argv[index:]
            if argument.startswith("--"):
                name, equals, value = argument.partition("=")
                argument = spellings.get(_key(name), name) + equals + value
            normalized.append(argument)
        return normalized


def quiet(verbose: bool) -> None:
    """Silences what the libraries print that asks nothing of the user, unless `verbose`: call
    it before TensorFlow, TFX or Beam is imported (the C++ log level is read at its load).

    A TF_CPP_MIN_LOG_LEVEL already set is left as it is.

    Args:
        verbose: the command's `--verbose`: leave everything as the libraries print it.
    """
    if verbose:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", TF_CPP_QUIET_LEVEL)
    for category, message in NO_ACTION_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for name in NO_ACTION_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    # absl's own logger class must be the one registered: imported, not created here.
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)
