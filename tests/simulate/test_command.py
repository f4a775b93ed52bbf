"""`ratewarden simulate` on the command line: tables, plots, reports and exit codes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ratewarden.cli import main
from ratewarden.simulate import patterns


def test_help_documents_every_pattern(capsys: pytest.CaptureFixture[str]) -> None:
    """--help prints each pattern by name with its parameters."""
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in patterns.PATTERNS:
        assert f"  {name} " in out


def test_a_run_prints_one_row_per_pattern_and_algorithm(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two patterns x two algorithms: four rows under the header."""
    code = main(["simulate", "--pattern", "boundary", "--pattern", "steady:load=2",
                 "--algorithm", "fixed_window", "--algorithm", "sliding_log",
                 "--duration", "300"])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5
    assert lines[1].split()[:2] == ["boundary", "fixed_window"]
    assert "200 (2.00x)" in lines[1]


def test_plots_are_written_one_per_pattern_and_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With two rates, FILE gets the pattern and rate in its name; PNG and SVG both."""
    png, svg = str(tmp_path / "out.png"), str(tmp_path / "out.svg")
    code = main(["simulate", "--pattern", "onoff", "--algorithm", "gcra", "--rate", "100/minute",
                 "--rate", "10/second", "--burst", "20", "--duration", "120",
                 "--plot", png, "--plot", svg])  # fmt: skip
    assert code == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert len(written) == 4
    assert "out-100-minute-burst-20.png" in written  # one pattern: only the rate tells apart
    assert all(p.stat().st_size > 1_000 for p in tmp_path.iterdir())
    assert "wrote" in capsys.readouterr().err


def test_bursts_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """--bursts --rate 100/minute --burst 20: the issue's acceptance table."""
    assert main(["simulate", "--bursts", "--rate", "100/minute", "--burst", "20"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(rows) == {"fixed_window", "gcra", "leaky_bucket", "sliding_log",
                         "sliding_window", "token_bucket"}  # fmt: skip
    assert "200 (2.00x)" in rows["fixed_window"]
    assert "119 (1.19x)" in rows["gcra"]


def test_accuracy_prints_a_row_per_model_and_load(capsys: pytest.CaptureFixture[str]) -> None:
    """--accuracy with two loads and one model: two rows and Cloudflare's line."""
    code = main(["simulate", "--accuracy", "--model", "poisson", "--load", "0.1",
                 "--load", "0.5", "--requests", "40000", "--sources", "50"])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["model", "poisson", "poisson", "cloudflare"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pattern", "nope"], "--pattern 'nope': unknown pattern 'nope'"),
        (["--algorithm", "moving_window"], "--algorithm 'moving_window': unknown algorithm;"),
        (["--rate", "5/fortnight"], "--rate '5/fortnight'"),
        (["--rate", "0/minute"], "--rate '0/minute'"),
        (["--duration", "0"], "--duration '0' must be a number above 0"),
        (["--burst", "-3"], "--burst '-3' must be a whole number >= 1"),
        (["--plot", "out.gif"], "must end in .png or .svg"),
        (["--bursts", "--pattern", "steady"], "--pattern cannot be used with --bursts"),
        (["--accuracy", "--algorithm", "gcra"], "--algorithm cannot be used with --accuracy"),
        (["--model", "poisson"], "--model cannot be used without --accuracy"),
        (["--accuracy", "--bursts"], "not allowed with argument"),
        (["--counting", "all"], "--counting cannot be used without --accuracy"),
        (["--accuracy", "--counting", "denied"], "invalid choice: 'denied'"),
        (["--accuracy", "--requests", "20000"], "periods"),
        (["--pattern", "steady:load=1e9"], "more than 5,000,000"),
    ],
)
def test_bad_arguments_exit_2_with_one_clear_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Bad input exits 2 and says what was wrong; no traceback."""
    try:
        code = main(["simulate", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_accuracy_checks_every_row_before_simulating_any(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad second load fails at once: the first row's simulation never starts."""
    from ratewarden.simulate import accuracy

    started: list[str] = []
    monkeypatch.setattr(accuracy, "compare", lambda *args, **kw: started.append("x"))
    code = main(["simulate", "--accuracy", "--load", "0.5", "--load", "900",
                 "--requests", "100000", "--sources", "100"])  # fmt: skip
    assert code == 2
    assert started == []
    assert "periods" in capsys.readouterr().err


def test_layers_print_a_row_for_all_layers_and_one_per_layer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--layers 10/second,1000/hour: per algorithm, the totals then each layer's denials.

    The numbers are those test_layered.py works out by hand for steady traffic at 2x.
    """
    code = main(["simulate", "--layers", "10/second,1000/hour", "--pattern", "steady:load=2",
                 "--algorithm", "gcra", "--algorithm", "fixed_window"])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 7
    assert lines[1].split()[2:8] == ["gcra", "all", "layers", "12000", "1166", "10834"]
    assert lines[2].split()[3:8] == ["10/second", "-", "-", "1009", "1010"]
    assert lines[3].split()[3:8] == ["1000/hour", "-", "-", "9825", "9825"]
    assert lines[4].split()[2] == "fixed_window"


def test_layers_repeat_to_compare_layered_limits(capsys: pytest.CaptureFixture[str]) -> None:
    """Each --layers is one layered limit; a layer takes its own burst as RATE:burst=N."""
    code = main(["simulate", "--layers", "10/second,1000/hour", "--layers",
                 "10/second;1000/hour:burst=100", "--pattern", "steady:load=2",
                 "--algorithm", "gcra", "--duration", "60"])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [re.split(r"\s{2,}", line)[2] for line in lines] == [
        "all layers", "10/second", "1000/hour",
        "all layers", "10/second", "1000/hour (burst 100)",
    ]  # fmt: skip


def test_layered_plots_are_written_one_per_layered_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--plot with two --layers: one figure each, named after the layers."""
    out = str(tmp_path / "layers.svg")
    code = main(["simulate", "--layers", "10/second,1000/hour", "--layers", "5/second,1000/hour",
                 "--pattern", "onoff", "--algorithm", "gcra", "--algorithm", "sliding_log",
                 "--duration", "120", "--plot", out])  # fmt: skip
    assert code == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["layers-10-second-1000-hour.svg", "layers-5-second-1000-hour.svg"]
    text = (tmp_path / written[0]).read_text(encoding="utf-8")
    assert "1000/hour: capacity" in text  # each layer's envelope is labelled
    assert "wrote" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--layers", "10/second"], "--layers '10/second': a layered limit needs two rates"),
        (["--layers", "10/second,5/fortnight"], "--layers '10/second,5/fortnight': rate"),
        (["--layers", "10/second:bust=2,1/hour"], "the one option a layer takes is burst=N"),
        (["--layers", "10/second,10/second"], "list the same rate twice"),
        (
            ["--layers", "10/second:burst=20,10/second", "--algorithm", "sliding_log"],
            "as layers of sliding_log",
        ),
        (
            ["--layers", "10/second,1/hour", "--rate", "5/minute"],
            "--rate cannot be used with --layers",
        ),
        (
            ["--layers", "10/second,1/hour", "--burst", "20"],
            "--burst cannot be used with --layers; give a layer its own burst",
        ),
        (["--bursts", "--layers", "10/second,1/hour"], "--layers cannot be used with --bursts"),
        (
            ["--accuracy", "--layers", "10/second,1/hour"],
            "--layers cannot be used with --accuracy",
        ),
        (
            ["--layers", "10/second,1/hour", "--model", "onoff"],
            "--model cannot be used without --accuracy",
        ),
        (
            ["--layers", "10/second,1/hour", "--algorithm", "concurrency"],
            "--algorithm 'concurrency': concurrency is not a rate",
        ),
        (["--layers", "10/second,1/hour", "--plot", "out.gif"], "must end in .png or .svg"),
    ],
)
def test_bad_layers_exit_2_with_one_clear_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Bad layered input exits 2 with one line naming it; no traceback, no table."""
    code = main(["simulate", *argv])
    assert code == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert len(captured.err.splitlines()) == 1
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_layers_are_all_checked_before_any_run_or_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad second --layers fails at once: no run starts and no figure is written."""
    from ratewarden.simulate import layered

    started: list[str] = []
    monkeypatch.setattr(layered, "run_layered", lambda *args: started.append("x"))
    code = main(["simulate", "--layers", "10/second,1000/hour", "--layers",
                 "10/second:burst=20,10/second", "--plot", str(tmp_path / "out.png")])  # fmt: skip
    assert code == 2
    assert started == []
    assert list(tmp_path.iterdir()) == []
    assert "as layers of fixed_window" in capsys.readouterr().err
