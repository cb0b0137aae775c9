"""Config files are read strictly (issue 46.10): a YAML alias bomb grew to 5.7 GB in 75 s and a
key given twice silently took its last value. Anchors, aliases, duplicate keys (nested too) and
files over 1 MiB are now one line naming the file, the line and the key. Nothing here imports
TFX."""

from __future__ import annotations

import json
import string
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfx_dynamic_inputs.pipeline import cli, config_files

_KEYS = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=6)
_SCALARS = st.one_of(
    st.integers(-1000, 1000), st.booleans(), st.text(string.ascii_letters, max_size=8)
)
# Nested JSON objects of scalars: what `custom_config` takes, so without the refusal the file
# loads (the old reader kept the last of two keys, and expanded aliases).
_TREES = st.recursive(
    _SCALARS,
    lambda children: st.dictionaries(_KEYS, children, min_size=1, max_size=4),
    max_leaves=12,
).filter(lambda tree: isinstance(tree, dict))
_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _mappings(tree: dict) -> list[dict]:
    """Every mapping of `tree`, depth first."""
    found = [tree]
    for value in tree.values():
        if isinstance(value, dict):
            found += _mappings(value)
    return found


def _emit(tree: dict, twice: dict, style: str, lines: list[str], indent: int) -> int | None:
    """Appends `tree` to `lines` as YAML (block) or JSON, one key a line, the first key of the
    mapping `twice` given again at its end; returns the line number of that repeat."""
    pad = " " * indent
    items = list(tree.items())
    if tree is twice:
        items.append(items[0])
    repeat = None
    for number, (key, value) in enumerate(items):
        if tree is twice and number == len(items) - 1:
            repeat = len(lines) + 1
        comma = "," if style == "json" and number < len(items) - 1 else ""
        if isinstance(value, dict):
            lines.append(f"{pad}{json.dumps(key)}:" + (" {" if style == "json" else ""))
            repeat = _emit(value, twice, style, lines, indent + 2) or repeat
            if style == "json":
                lines.append(f"{pad}}}{comma}")
        else:
            lines.append(f"{pad}{json.dumps(key)}: {json.dumps(value)}{comma}")
    return repeat


def _config_text(tree: dict, twice: dict, style: str) -> tuple[str, int]:
    """A config file with `tree` as the speaker's custom_config, a key of `twice` repeated; the
    line of the repeat."""
    lines = (
        ['{"speaker": {"custom_config": {'] if style == "json" else ["speaker:", "  custom_config:"]
    )
    repeat = _emit(tree, twice, style, lines, 4)
    if style == "json":
        lines.append("}}}")
    return "\n".join(lines) + "\n", repeat


@_SETTINGS
@given(tree=_TREES, data=st.data(), style=st.sampled_from(["yaml", "json"]))
def test_a_key_given_twice_at_any_depth_is_one_line_naming_file_line_and_key(
    tmp_path_factory, tree, data, style
):
    twice = data.draw(st.sampled_from(_mappings(tree)))
    text, repeat = _config_text(tree, twice, style)
    path = tmp_path_factory.mktemp("twice") / f"config.{style}"
    path.write_text(text)
    key = next(iter(twice))
    with pytest.raises(cli.ConfigError) as refused:
        cli.load_file(str(path))
    assert str(refused.value) == (
        f"--config {path}: line {repeat}: key {key!r} is given twice in one "
        f"{'object' if style == 'json' else 'mapping'} (a key may appear once)"
    )


@_SETTINGS
@given(tree=_TREES, shared=_TREES, data=st.data())
def test_an_anchor_at_any_depth_is_one_line_naming_file_and_line(
    tmp_path_factory, tree, shared, data
):
    # The same object twice: safe_dump writes it once with an anchor, then an alias.
    first, second = data.draw(st.lists(st.sampled_from(_mappings(tree)), min_size=2, max_size=2))
    first["anchored"], second["aliased"] = shared, shared
    text = yaml.safe_dump({"speaker": {"custom_config": tree}})
    assert "&id001" in text and "*id001" in text
    path = tmp_path_factory.mktemp("anchor") / "config.yaml"
    path.write_text(text)
    line = text[: text.index("&id001")].count("\n") + 1
    with pytest.raises(cli.ConfigError) as refused:
        cli.load_file(str(path))
    assert str(refused.value) == (
        f"--config {path}: line {line}: YAML anchor &id001 refused: a config file may not use "
        "anchors or aliases (they can expand without bound)"
    )


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 12)]
    path = tmp_path / "bomb.yaml"
    path.write_text("speaker:\n  custom_config:\n" + "".join(f"    {line}\n" for line in lines))
    started = time.monotonic()
    with pytest.raises(cli.ConfigError, match=rf"^--config {path}: line 3: YAML anchor &a0 "):
        cli.parse_local_args(["speaker", "--config", str(path)])
    assert time.monotonic() - started < 5


def test_a_merge_key_without_an_alias_still_reads():
    loaded = config_files._StrictLoader  # the merge key is YAML's, not an alias
    assert yaml.load("m:\n  <<: {a: 1, b: 2}\n  a: 3\n", Loader=loaded) == {"m": {"a": 3, "b": 2}}


def test_files_over_the_size_bound_are_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * config_files.MAX_CONFIG_BYTES)
    assert cli.load_file(str(path)) == {}  # a comment of exactly the bound
    path.write_bytes(b"#" * (config_files.MAX_CONFIG_BYTES + 1))
    with pytest.raises(cli.ConfigError) as refused:
        cli.load_file(str(path))
    assert str(refused.value) == (
        f"--config {path}: more than 1048576 bytes (MAX_CONFIG_BYTES): not a config file"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"speaker: {num_epochs: \xff}\n", "not UTF-8 text (byte 22)"),
        (b"[" * 100_000, "nests too deep for the parser"),
    ],
)
def test_undecodable_or_too_deep_files_are_one_line(tmp_path, content, message):
    for name in ("config.yaml", "config.json"):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(cli.ConfigError) as refused:
            cli.load_file(str(path))
        assert str(refused.value) == f"--config {path}: {message}"


def test_a_json_flag_value_is_read_as_strictly():
    with pytest.raises(cli.ConfigError) as refused:
        cli.parse_local_args(["speaker", "--custom_config", '{"lr": 1,\n "lr": 2}'])
    assert str(refused.value) == (
        "--custom_config: line 2: key 'lr' is given twice in one object (a key may appear once)"
    )
    parsed = cli.parse_local_args(["speaker", "--custom_config", '{"lr": {"lr": 2}}'])
    assert parsed.settings["custom_config"] == {"lr": {"lr": 2}}
