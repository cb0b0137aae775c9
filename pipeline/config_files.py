"""Reading a config file (JSON for `.json`, else YAML) strictly: bounded, no aliases, no
duplicate keys.

A config file is a few dozen lines a person wrote, so what a parser would allow beyond that is
refused, in one line naming the file (and the line and key where there is one):

- more than `MAX_CONFIG_BYTES` (1 MiB): nothing past that is read;
- YAML anchors and aliases (`&name`, `*name`): ten nested aliases of ten items each expand to
  ten billion; a 1 KB file grew to 5.7 GB in 75 s. Refused at the first anchor, before any
  expansion (also the merge key's `<<: *base`, which needs one);
- a key given twice in one mapping or object: YAML and JSON parsers keep the last one silently;
- text that is not UTF-8, or nests too deep for the parser.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
from typing import Any

import yaml

# The most a config file may hold: a config is tens of lines; 1 MiB is thousands.
MAX_CONFIG_BYTES = 1 << 20


class ConfigFileError(ValueError):
    """A config file that is not read; the message is one line (without the file's name,
    which the caller adds)."""


class RefusedContent(ConfigFileError):
    """Text a parser would read but a config may not hold: a YAML anchor or alias, a key given
    twice, nesting too deep, more than `MAX_CONFIG_BYTES`."""


class _StrictLoader(yaml.SafeLoader):
    """The safe YAML loader, refusing anchors, aliases and duplicate keys."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            kind = "alias" if isinstance(event, yaml.AliasEvent) else "anchor"
            sign = "*" if kind == "alias" else "&"
            raise RefusedContent(
                f"line {event.start_mark.line + 1}: YAML {kind} {sign}{anchor} refused: a config "
                "file may not use anchors or aliases (they can expand without bound)"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<`: flatten_mapping's
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # unhashable: the base class says so
                break
            if repeated:
                raise RefusedContent(
                    f"line {key_node.start_mark.line + 1}: key {key!r} is given twice in one "
                    "mapping (a key may appear once)"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _strict_object(
    s_and_end: tuple[str, int],
    strict: bool,
    scan_once: Any,
    object_hook: Any,
    object_pairs_hook: Any,
    memo: dict[str, str] | None = None,
) -> tuple[dict[str, Any], int]:
    """`json.decoder.JSONObject`, refusing a key given twice, named with the line of its value
    (the values' positions are where the object scans them)."""
    text = s_and_end[0]
    positions: list[int] = []

    def scan_value(string: str, index: int) -> tuple[Any, int]:
        positions.append(index)
        return scan_once(string, index)

    pairs, end = json.decoder.JSONObject(
        s_and_end, strict, scan_value, None, lambda found: found, memo
    )
    seen = set()
    for (key, _), position in zip(pairs, positions, strict=True):
        if key in seen:
            raise RefusedContent(
                f"line {text.count(chr(10), 0, position) + 1}: key {key!r} is given twice in one "
                "object (a key may appear once)"
            )
        seen.add(key)
    return dict(pairs), end


def parse_json(text: str) -> Any:
    """The JSON value `text` holds, read as strictly as a config file (a flag's JSON value).

    Args:
        text: JSON text.

    Returns:
        The value.

    Raises:
        ConfigFileError: `text` is not JSON, gives a key twice in one object or nests too deep.

    Example:
        parse_json('{"learning_rate": 0.001}')  # {"learning_rate": 0.001}
    """
    decoder = json.JSONDecoder()
    # The pure-Python scanner calls `parse_object` (the C one builds objects itself).
    decoder.parse_object = _strict_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    try:
        return decoder.decode(text)
    except RecursionError:
        raise RefusedContent("nests too deep for the parser") from None
    except ConfigFileError:
        raise
    except ValueError as error:
        raise ConfigFileError(str(error)) from None


def read_config_file(path: str) -> Any:
    """The value in the config file `path`: JSON for a `.json` name, else YAML.

    Args:
        path: the file.

    Returns:
        What the file holds (None for an empty YAML file).

    Raises:
        OSError: the file cannot be read.
        ConfigFileError: the file is larger than `MAX_CONFIG_BYTES`, not UTF-8, not valid JSON
            or YAML, uses a YAML anchor or alias, gives a key twice, or nests too deep.

    Example:
        read_config_file("config.yaml")  # {"speaker": {"num_epochs": 20}}
    """
    with open(path, "rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise RefusedContent(
            f"more than {MAX_CONFIG_BYTES} bytes (MAX_CONFIG_BYTES): not a config file"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigFileError(f"not UTF-8 text (byte {error.start})") from None
    if path.endswith(".json"):
        return parse_json(text)
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:
        raise RefusedContent("nests too deep for the parser") from None
    except ConfigFileError:
        raise
    except (ValueError, yaml.YAMLError) as error:
        # YAML's messages span lines (with a snippet); one line is what the user gets.
        raise ConfigFileError(" ".join(str(error).split())) from None
