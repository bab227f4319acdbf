"""nvbridge report in a real browser: Debian's chromium, headless, driven through chromedriver.

Each page opens from file:// with the network closed to it: no console error or warning, no
request but the page itself, every section in the DOM and every chart drawn (an SVG in its
element), the op table a real <table> that sorts, groups and filters, and the page no wider
than a 1366-px laptop screen. Screenshots are kept (the folder is printed; set
NVBRIDGE_SCREENSHOTS to choose it) for a person to look at.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvbridge.cli import cli
from tests.conftest import SAMPLE_DB, real_db

pytestmark = pytest.mark.browser

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# as the machine notes say: no background networking, no first-run, no updates: nothing leaves
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1366,900",
    "--hide-scrollbars",
]
SECTIONS = ("capture", "steps", "ops", "modules", "roofline", "findings", "timeline", "ranks", "memory")
SAMPLES = {
    "advise": SAMPLE_DB / "advise_cpu+synthetic_gpu.sqlite",
    "ranks": SAMPLE_DB / "ranks_cpu+synthetic_gpu.sqlite",
    "cnn": SAMPLE_DB / "cnn_cpu+synthetic_gpu.sqlite",
}


def _require_browser() -> None:
    """chromium, chromedriver and selenium, which the README's test command installs
    (scripts/install_system_deps.sh and the test extra). Missing, the tests fail, in CI and
    everywhere else: a report page that was never opened in a browser is not tested. Only an
    explicit NVBRIDGE_NO_BROWSER=1 skips them."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        if os.environ.get("NVBRIDGE_NO_BROWSER") == "1":
            pytest.skip(f"NVBRIDGE_NO_BROWSER=1 and missing: {', '.join(missing)}")
        pytest.fail(f"missing: {', '.join(missing)}; run scripts/install_system_deps.sh (or set NVBRIDGE_NO_BROWSER=1)")


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("NVBRIDGE_SCREENSHOTS")
    folder = Path(where) if where else tmp_path_factory.mktemp("page-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots of the report pages: {folder}")
    return folder


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("browser-pages")
    written = {}
    for name, src in SAMPLES.items():
        written[name] = out / f"{name}.html"
        _report(str(src), "-o", str(written[name]))
    written["compare"] = out / "compare.html"
    base, extra = SAMPLE_DB / "diff_base_cpu+synthetic_gpu.sqlite", SAMPLE_DB / "diff_extra_cpu+synthetic_gpu.sqlite"
    _report(str(base), "--compare", str(extra), "-o", str(written["compare"]))
    return written


def _report(*args: str) -> None:
    result = CliRunner().invoke(cli, ["report", *args])
    assert result.exit_code == 0, result.output


def _open(driver: Any, path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Load the page, wait for its charts; the console messages and the URLs it requested."""
    driver.get_log("browser"), driver.get_log("performance")  # drop what an earlier page left
    driver.get(path.as_uri())
    deadline = time.monotonic() + 30
    while driver.execute_script("return document.querySelector('[data-charts-drawn]') === null"):
        assert time.monotonic() < deadline, "the charts were not drawn in 30 s"
        time.sleep(0.05)
    console = driver.get_log("browser")
    requests = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
            requests.append(message["params"].get("request", {}).get("url") or message["params"].get("url"))
    return console, requests


def _screenshot(driver: Any, folder: Path, name: str) -> Path:
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1366, min(height + 140, 16000))
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path))
    driver.set_window_size(1366, 900)
    return path


@pytest.mark.parametrize("name", ["advise", "ranks", "cnn", "compare"])
def test_page_loads_offline_and_draws_every_section(
    driver: Any, pages: dict[str, Path], shots: Path, name: str
) -> None:
    console, requests = _open(driver, pages[name])
    assert [m for m in console if m["level"] in ("SEVERE", "WARNING")] == []
    assert requests == [pages[name].as_uri()]  # the page itself, nothing else: no CDN, no font, no beacon
    present = driver.execute_script("return Array.from(document.querySelectorAll('section')).map(s => s.id)")
    expected = [*SECTIONS, "compare"] if name == "compare" else list(SECTIONS)
    assert present == expected
    charts = json.loads(driver.execute_script("return document.getElementById('nvbridge-charts').textContent"))
    assert charts
    drawn = driver.execute_script(
        "return Object.keys(JSON.parse(document.getElementById('nvbridge-charts').textContent))"
        ".filter(id => document.querySelector('#' + id + ' svg'))"
    )
    assert sorted(drawn) == sorted(charts)
    assert int(
        driver.execute_script("return document.querySelector('[data-charts-drawn]').getAttribute('data-charts-drawn')")
    ) == len(charts)
    # text fits a 1366-px laptop screen: nothing wider than the window
    assert driver.execute_script("return document.documentElement.scrollWidth") <= 1366
    assert driver.execute_script("return document.querySelectorAll('table').length") >= 3
    path = _screenshot(driver, shots, name)
    assert path.stat().st_size > 10_000


def _names(driver: Any) -> list[str]:
    return list(
        driver.execute_script(
            "return Array.from(document.querySelectorAll('#op-table tbody th')).map(c => c.textContent)"
        )
    )


def _click(driver: Any, title: str) -> None:
    from selenium.webdriver.common.by import By

    buttons = driver.find_elements(By.CSS_SELECTOR, "#op-table thead button")
    next(b for b in buttons if b.text.replace("\n", " ") == title).click()


def test_op_table_sorts_groups_and_filters(driver: Any, pages: dict[str, Path], shots: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _open(driver, pages["advise"])
    data = json.loads(driver.execute_script("return document.getElementById('nvbridge-data').textContent"))
    rows = data["summary"]["rows"]
    by_gpu = _names(driver)
    assert by_gpu == [r["name"] for r in rows]  # summary's order: self CUDA time, largest first
    cpu = {r["name"]: r["self_cpu_ns"] for r in rows}  # names are unique when grouped by name
    _click(driver, "Self CPU")
    by_cpu = _names(driver)
    assert by_cpu != by_gpu and sorted(by_cpu) == sorted(by_gpu)
    assert [cpu[n] for n in by_cpu] == sorted(cpu.values(), reverse=True)
    heading = driver.find_element(By.CSS_SELECTOR, "#op-table th[aria-sort]")
    assert heading.get_attribute("aria-sort") == "descending" and "Self CPU" in heading.text
    _click(driver, "Self CPU")  # again: ascending
    assert [cpu[n] for n in _names(driver)] == sorted(cpu.values())
    Select(driver.find_element(By.ID, "op-group")).select_by_value("module")
    titles = driver.execute_script(
        "return Array.from(document.querySelectorAll('#op-table thead th')).map(c => c.textContent)"
    )
    assert titles[1].startswith("Module")
    assert len(_names(driver)) == len(data["tables"]["module"]["rows"])
    box = driver.find_element(By.ID, "op-filter")
    box.send_keys("^aten::a")
    shown = _names(driver)
    assert shown and all(n.startswith("aten::a") for n in shown)
    assert len(shown) == sum(r["name"].startswith("aten::a") for r in data["tables"]["module"]["rows"])
    _screenshot(driver, shots, "advise-op-table-grouped-by-module")


def test_roofline_page_of_a_real_export(driver: Any, shots: Path, tmp_path: Path) -> None:
    out = tmp_path / "pyprof.html"
    _report(str(real_db("nvprof-2020-pytorch14-pyprof-lm.sqlite")), "-o", str(out))
    console, requests = _open(driver, out)
    assert [m for m in console if m["level"] in ("SEVERE", "WARNING")] == []
    assert requests == [out.as_uri()]
    points = driver.execute_script(
        "return document.querySelectorAll('#chart-roofline g.mark-symbol.role-mark path').length"
    )
    data = json.loads(driver.execute_script("return document.getElementById('nvbridge-data').textContent"))
    assert points == len(data["roofline"]["points"]) > 0
    _screenshot(driver, shots, "pyprof-roofline")


def test_notebook_outputs_share_one_document(driver: Any, shots: Path, tmp_path: Path) -> None:
    """Four outputs (Report, Summary, Advice, Diff) in one document, as a notebook shows them:
    each draws its own charts, the Vega bundle runs once."""
    import nvbridge
    import nvbridge.page  # noqa: F401  (registers the notebook renderers, as nvbridge.load does in IPython)
    from nvbridge.analysis.advise import advise
    from nvbridge.analysis.diff import diff

    src = SAMPLES["advise"]
    report = nvbridge.load(src)
    cells = [
        report._repr_html_(),
        nvbridge.summarize(report, group_by_input_shape=True, group_by_module=True)._repr_html_(),
        advise(src)[0]._repr_html_(),
        diff(
            SAMPLE_DB / "diff_base_cpu+synthetic_gpu.sqlite", SAMPLE_DB / "diff_extra_cpu+synthetic_gpu.sqlite"
        )._repr_html_(),
    ]
    page = tmp_path / "notebook.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
        + "".join(f'<div class="cell">{c}</div>' for c in cells)
        + "</body></html>",
        "utf-8",
    )
    driver.get(page.as_uri())
    deadline = time.monotonic() + 30
    while driver.execute_script("return document.querySelectorAll('.nvbridge-page[data-charts-drawn]').length") < 4:
        assert time.monotonic() < deadline, "not every output drew its charts"
        time.sleep(0.05)
    console = driver.get_log("browser")
    assert [m for m in console if m["level"] in ("SEVERE", "WARNING")] == []
    per_cell = driver.execute_script(
        "return Array.from(document.querySelectorAll('.cell')).map(c => [c.querySelectorAll('.chart svg').length,"
        " c.querySelectorAll('.chart').length, c.querySelectorAll('table').length])"
    )
    assert all(svgs == charts > 0 and tables > 0 for svgs, charts, tables in per_cell), per_cell
    _screenshot(driver, shots, "notebook-outputs")
