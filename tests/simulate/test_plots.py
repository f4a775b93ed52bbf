"""Plots: real PNG and SVG files from real runs, and a clear message without matplotlib."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate import patterns, plots, runner

RATE = Rate.parse("100/minute", burst=20)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def runs() -> list[runner.Run]:
    pattern = patterns.parse("boundary")
    return [runner.run(pattern, name, RATE, 300) for name in ("fixed_window", "gcra")]


def test_a_png_is_a_png_of_one_row_per_algorithm(tmp_path: Path) -> None:
    """The file starts with the PNG signature and decodes to an image taller for more rows."""
    image = pytest.importorskip("matplotlib.image")
    one = plots.plot_runs(runs()[:1], tmp_path / "one.png")
    two = plots.plot_runs(runs(), tmp_path / "two.png")
    assert one.read_bytes()[:8] == PNG_SIGNATURE
    assert two.read_bytes()[:8] == PNG_SIGNATURE
    assert image.imread(two).shape[0] > image.imread(one).shape[0]


def test_an_svg_is_xml_with_an_svg_root_and_the_algorithm_names(tmp_path: Path) -> None:
    """SVG output parses as XML, its root is <svg>, and the panels are labelled."""
    path = plots.plot_runs(runs(), tmp_path / "runs.svg")
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = path.read_text(encoding="utf-8")
    assert "fixed_window" in text or "fixed" in text


@pytest.mark.parametrize("name", ["plot.jpg", "plot", "plot.PNG.txt"])
def test_an_unsupported_suffix_is_refused(tmp_path: Path, name: str) -> None:
    """Only .png and .svg; the error names the file."""
    with pytest.raises(ConfigurationError, match=r"must end in \.png or \.svg"):
        plots.plot_runs(runs(), tmp_path / name)


def test_a_missing_directory_is_refused_before_drawing(tmp_path: Path) -> None:
    """The directory must exist; nothing is created behind the caller's back."""
    with pytest.raises(ConfigurationError, match="does not exist"):
        plots.plot_runs(runs(), tmp_path / "nowhere" / "plot.png")


def test_without_matplotlib_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A None entry in sys.modules makes the import fail as if matplotlib were absent."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'ratewarden\[simulate\]'"):
        plots.plot_runs(runs(), tmp_path / "plot.png")
    assert not (tmp_path / "plot.png").exists()


def test_a_long_run_is_sampled_so_the_svg_stays_small(tmp_path: Path) -> None:
    """A million admissions draw a cumulative line of 5,000 steps, not a million vertices."""
    rate = Rate.parse("100/second")
    run = runner.run(patterns.parse("steady:load=0.9"), "gcra", rate, 10_000)
    assert sum(run.allowed) > 800_000
    times, counts = plots._cumulative(run)
    assert len(times) == len(counts) == plots._STEPS + 1
    assert counts[-1] == sum(c for c, ok in zip(run.costs, run.allowed, strict=True) if ok)
    path = plots.plot_runs([run], tmp_path / "long.svg")
    assert path.stat().st_size < 2_000_000


def test_a_layered_run_draws_a_line_per_layer_in_both_panels(tmp_path: Path) -> None:
    """Left: each layer's limit / period; right: each layer's capacity + limit / period x t."""
    from ratewarden.simulate import layered

    layers = layered.parse_layers("10/second,1000/hour")
    run = layered.run_layered(patterns.parse("onoff"), "gcra", layers, 300)
    path = plots.plot_runs([run], tmp_path / "layers.svg")
    text = path.read_text(encoding="utf-8")
    for rate in ("10/second", "1000/hour"):
        assert f"{rate}: limit / period" in text
        assert f"{rate}: capacity + limit / period x t" in text
