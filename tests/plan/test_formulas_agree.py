"""Each formula the plan prints evaluates to the figure beside it.

Operands were rounded to whole numbers from 100 up: ``--calls-per-primary 7499.99`` printed
``9  ceil(30,000 / (7,500 x 0.5))``, which is 8. And utilization was rounded twice, differently:
``41%`` (or ``40%``) in its row beside ``(1 - 0.41)`` in the latency's formula, the latency
computed from neither. Now a ceil's operands are shown as given, rho is rounded once for both
rows, and the latency and headroom are computed from the operands as shown.
"""

from __future__ import annotations

import math
import re

import pytest

from ratewarden.cli import main
from ratewarden.plan import PlanInput, format_plan, plan


def rows(out: str) -> dict[str, tuple[str, str]]:
    """``figure -> (value, formula)`` of the printed plan."""
    found = {}
    for line in out.splitlines():
        match = re.match(r"  (\S.*?)  +(\S+(?: \S+)?)  (.*)$", line)
        if match:
            found[match[1]] = (match[2], match[3])
    return found


def number(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.parametrize(("rps", "per_primary"), [("30000", "7499.99"), ("7500.4", "1000")])
def test_the_primaries_formula_rounds_up_to_the_figure(
    capsys: pytest.CaptureFixture[str], rps: str, per_primary: str
) -> None:
    """ceil(calls / (per primary x utilization)) with the numbers shown is the number shown
    (7,500.4 calls on primaries of 1,000 at 50% need 16, where 7,500 would need 15)."""
    assert main(["plan", "--rps", rps, "--calls-per-primary", per_primary]) == 0
    value, how = rows(capsys.readouterr().out)["needed"]
    calls, per, share = re.fullmatch(r"ceil\((\S+) / \((\S+) x (\S+)\)\)", how).groups()  # type: ignore[union-attr]
    assert int(value) == math.ceil(number(calls) / (number(per) * number(share)))


def test_float_noise_adds_no_primary() -> None:
    """77 calls on primaries of 11 at 70% need 10, though floats divide to 10.000000000000002."""
    result = plan(PlanInput(rps=100, global_share=0.7, descriptors=1.1, calls_per_primary=11,
                            max_utilization=0.7))  # fmt: skip
    assert result.primaries_needed == 10
    assert "ceil(77 / (11 x 0.7))" in format_plan(result)


@pytest.mark.parametrize(
    ("rps", "primaries", "per_primary"),
    [(24_300, 3, 20_000), (30_000, 9, 7_499.99), (9_994, 1, 10_000), (1_234.5, 1, 1_300)],
)  # fmt: skip
def test_utilization_and_latency_agree_with_their_formulas(
    rps: float, primaries: int, per_primary: float
) -> None:
    """The utilization row's percent is the latency formula's rho; rtt + S / (1 - rho) with the
    numbers shown is the latency shown, and timeout / latency the headroom."""
    result = plan(PlanInput(rps=rps, primaries=primaries, calls_per_primary=per_primary,
                            rtt_ms=0.5, timeout_ms=20))  # fmt: skip
    shown = rows(format_plan(result))
    percent = shown["utilization"][0]
    latency, how = shown["added per check"]
    rtt, service, rho = re.fullmatch(r"(\S+) ms rtt \+ (\S+) ms / \(1 - (\S+)\)", how).groups()  # type: ignore[union-attr]
    places = len(percent.rstrip("%").partition(".")[2])
    assert abs(number(percent.rstrip("%")) - number(rho) * 100) <= 0.5 * 10**-places + 1e-9
    assert f"{number(rtt) + number(service) / (1 - number(rho)):.3g} ms" == latency
    assert result.latency_ms == number(latency.removesuffix(" ms"))
    headroom, how = shown["headroom"]
    assert how == f"20 ms timeout / {latency}"
    assert headroom == f"{20 / number(latency.removesuffix(' ms')):.1f}x"


def test_the_walks_case_reads_one_rho() -> None:
    """24,300 calls on 3 primaries of 20,000: rho 0.405, 41% and 0.405, never 40% beside 0.41."""
    shown = rows(format_plan(plan(PlanInput(rps=24_300, primaries=3, calls_per_primary=20_000,
                                            rtt_ms=0.5))))  # fmt: skip
    assert shown["utilization"][0] == "41%"
    assert shown["added per check"] == ("0.584 ms", "0.5 ms rtt + 0.05 ms / (1 - 0.405)")


def test_near_saturation_rho_keeps_three_figures_of_its_gap() -> None:
    """At rho 0.9994 the row and the formula show 99.940% and 0.999400, not 100% and 1.00."""
    shown = rows(format_plan(plan(PlanInput(rps=9_994, primaries=1, calls_per_primary=10_000,
                                            rtt_ms=0.5))))  # fmt: skip
    assert shown["utilization"][0] == "99.940%"
    assert shown["added per check"][1] == "0.5 ms rtt + 0.1 ms / (1 - 0.999400)"
