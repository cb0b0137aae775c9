"""Ctrl-C on the materialize launcher: a short line and exit status 130, not a traceback."""

from __future__ import annotations

from components.materialize import __main__ as cli
from components.materialize import pairs_pipeline


def test_interrupt_exits_130_with_one_line(monkeypatch, capsys, tmp_path):
    def interrupted(config):
        raise KeyboardInterrupt

    monkeypatch.setattr(pairs_pipeline, "run_pairs", interrupted)
    for folder in ("x", "y"):
        (tmp_path / folder).mkdir()
    (tmp_path / "pairs.jsonl").write_text("")
    status = cli.main(
        [
            "pairs",
            "--x_dir",
            str(tmp_path / "x"),
            "--y_dir",
            str(tmp_path / "y"),
            "--pairs",
            str(tmp_path / "pairs.jsonl"),
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    assert status == 130
    assert capsys.readouterr().err.strip() == "materialize pairs: interrupted"
