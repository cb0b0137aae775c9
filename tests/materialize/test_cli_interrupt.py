"""Ctrl-C on the materialize launcher: one line and exit status 130, however the runner reports
it, never a traceback or a success line with status 0."""

from __future__ import annotations

import signal

import pytest

from tests.materialize import generate
from tfx_dynamic_inputs.materialize import __main__ as cli
from tfx_dynamic_inputs.materialize import pairs_pipeline

SUMMARY = {
    "ok": True,
    "record_sets": {name: {"num_records": 3, "num_shards": 1} for name in ("x", "y")},
    "rejects": {"total": 0, "by_reason": {}},
    "job": "pairs",
}


def _interrupt_then(after):
    def run(config):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt as error:
            return after(error)
        raise AssertionError("the CLI's SIGINT handler did not raise KeyboardInterrupt")

    return run


def _reraise(error):
    raise error


def _as_beam_error(error):
    # What a DirectRunner worker thread makes of the interrupt.
    raise RuntimeError("KeyboardInterrupt [while running 'MaterializePairs/Decode']") from error


@pytest.mark.parametrize("after", [_reraise, _as_beam_error], ids=["interrupt", "beam_error"])
def test_interrupt_exits_130_with_one_line(monkeypatch, capsys, tmp_path, after):
    monkeypatch.setattr(pairs_pipeline, "run_pairs", _interrupt_then(after))
    handler_before = signal.getsignal(signal.SIGINT)
    status = cli.main(generate.empty_pairs_argv(tmp_path))
    assert status == 130
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("materialize pairs: interrupted; nothing of this run is served")
    assert "--overwrite" in line
    assert signal.getsignal(signal.SIGINT) is handler_before


def test_an_interrupt_as_the_run_commits_is_still_status_130(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(pairs_pipeline, "run_pairs", _interrupt_then(lambda error: SUMMARY))
    assert cli.main(generate.empty_pairs_argv(tmp_path)) == 130
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("materialize pairs: interrupted after the run was written")


def test_other_errors_are_not_taken_for_an_interrupt(monkeypatch, tmp_path):
    def failing(config):
        raise RuntimeError("a bug")

    monkeypatch.setattr(pairs_pipeline, "run_pairs", failing)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(generate.empty_pairs_argv(tmp_path))
