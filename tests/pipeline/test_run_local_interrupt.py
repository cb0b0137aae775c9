"""Ctrl-C in `run_local`: one line naming what finished and that a re-run resumes, exit status
130, however the runner reports the interrupt, never a traceback."""

from __future__ import annotations

import signal

import pytest

from tfx_dynamic_inputs.pipeline import run_local


def _interrupt_then(after):
    def run(pipeline):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt as error:
            after(error)
        raise AssertionError("run_local's SIGINT handler did not raise KeyboardInterrupt")

    return run


def _reraise(error):
    raise error


def _as_beam_error(error):
    # What a DirectRunner worker thread makes of the interrupt, reported as a failed component.
    raise RuntimeError("KeyboardInterrupt [while running 'MaterializePairs/Decode']")


@pytest.mark.parametrize("after", [_reraise, _as_beam_error], ids=["interrupt", "beam_error"])
def test_an_interrupted_run_is_one_line_and_status_130(monkeypatch, capsys, tmp_path, after):
    monkeypatch.setattr(run_local, "run", _interrupt_then(after))
    handler_before = signal.getsignal(signal.SIGINT)
    status = run_local.main(["cyclegan", "--work_dir", str(tmp_path / "work")])
    assert status == 130
    out, err = capsys.readouterr()
    [line] = err.strip().splitlines()
    assert line == (
        "run_local cyclegan: interrupted; done in the newest run: no node; "
        "the same command resumes from them (ML Metadata's cache)"
    )
    assert "Traceback" not in out + err
    assert signal.getsignal(signal.SIGINT) is handler_before


def test_a_failure_without_an_interrupt_is_still_a_failed_run(monkeypatch, capsys, tmp_path):
    def failing(pipeline):
        raise RuntimeError("a bug")

    monkeypatch.setattr(run_local, "run", failing)
    assert run_local.main(["cyclegan", "--work_dir", str(tmp_path / "work")]) == 1
    assert "error: RuntimeError: a bug" in capsys.readouterr().err
