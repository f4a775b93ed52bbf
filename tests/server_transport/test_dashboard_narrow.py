"""The dashboard 1280 px wide: long rule names and limits wrap, and nothing scrolls sideways.

Headless Chromium (tests/server_transport/_cdp.py) against a real `ratewarden serve`, its
viewport set to 1280 x 900. Skipped, with the reason, when there is no Chromium binary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._servers import HOST
from tests.server_transport._cdp import Browser, Page, find_chromium
from tests.server_transport._process import ServeProcess, serving
from tests.server_transport.conftest import rules_file

#: A rule path and a limit text as long as real configs have them, and a longer shadow rule.
RULES = """\
domain: public_api
descriptors:
  - key: path
    value: /login
    descriptors:
      - key: remote_address
        rate_limit:
          limits:
            - {unit: second, requests_per_unit: 20}
            - {unit: minute, unit_multiplier: 5, requests_per_unit: 1000}
  - key: tenant_with_a_rather_long_name
    value: some-tenant-value
    descriptors:
      - key: user_agent_family
        shadow_mode: true
        rate_limit: {algorithm: sliding_window, unit: hour, requests_per_unit: 100000}
"""

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium binary (apt-get install chromium, or set RATEWARDEN_CHROMIUM)",
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServeProcess]:
    with serving(rules_file(tmp_path, RULES)) as server:
        yield server


@pytest.fixture
def page() -> Iterator[Page]:
    assert CHROMIUM is not None
    browser = Browser(CHROMIUM)
    try:
        tab = browser.page()
        yield tab
        tab.close()
    finally:
        browser.close()


def test_at_1280_px_the_rules_table_fits_and_keeps_its_sparkline_column(
    served: ServeProcess, page: Page
) -> None:
    """1280 px: no panel scrolls sideways (scrollWidth <= clientWidth); the long rule and limit
    cells wrap onto more lines; the "last 60 s" sparkline keeps its 120 px, inside the panel."""
    page.call(
        "Emulation.setDeviceMetricsOverride",
        width=1280,
        height=900,
        deviceScaleFactor=1,
        mobile=False,
    )
    page.call("Page.navigate", url=f"http://{HOST}:{served.http_port}/dashboard?interval=250")
    page.wait_for("document.querySelectorAll('#rules tr[data-rule]').length === 2")
    assert page.evaluate("window.innerWidth") == 1280
    overflowing = page.evaluate(
        "[...document.querySelectorAll('main section')].filter(s => !s.hidden"
        " && s.scrollWidth > s.clientWidth).map(s => s.querySelector('h2').textContent)"
    )
    assert overflowing == []
    row = "document.querySelector('#rules tr[data-rule=\"public_api.path_/login.remote_address\"]')"
    assert page.evaluate(f"{row}.cells[1].textContent") == "20 per second, 1000 per 5 minutes"
    graph = page.evaluate(
        f"(() => {{ const svg = {row}.lastChild.querySelector('svg').getBoundingClientRect();"
        " const box = document.querySelector('#rules').closest('section').getBoundingClientRect();"
        " return [svg.width, svg.right <= box.right]; })()"
    )
    assert graph == [120, True]
    assert page.errors() == []
