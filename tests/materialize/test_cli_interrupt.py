"""Ctrl-C on the materialize launcher: a short line and exit status 130, not a traceback."""

from __future__ import annotations

from components.materialize import __main__ as cli
from components.materialize import pairs_pipeline
from tests.materialize import generate


def test_interrupt_exits_130_with_one_line(monkeypatch, capsys, tmp_path):
    def interrupted(config):
        raise KeyboardInterrupt

    monkeypatch.setattr(pairs_pipeline, "run_pairs", interrupted)
    status = cli.main(generate.empty_pairs_argv(tmp_path))
    assert status == 130
    assert capsys.readouterr().err.strip() == "materialize pairs: interrupted"
