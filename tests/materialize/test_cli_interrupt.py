"""Ctrl-C on the materialize launcher: a short line and exit status 130, not a traceback."""

from __future__ import annotations

from components.materialize import __main__ as cli


def test_interrupt_exits_130_with_one_line(monkeypatch, capsys, tmp_path):
    def interrupted(config):
        raise KeyboardInterrupt

    config_class, _ = cli._JOBS["pairs"]
    monkeypatch.setitem(cli._JOBS, "pairs", (config_class, interrupted))
    status = cli.main(
        [
            "pairs",
            "--x_dir",
            str(tmp_path),
            "--y_dir",
            str(tmp_path),
            "--pairs",
            str(tmp_path / "pairs.jsonl"),
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    assert status == 130
    assert capsys.readouterr().err.strip() == "materialize pairs: interrupted"
