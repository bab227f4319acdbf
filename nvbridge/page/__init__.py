"""``nvbridge report``: one self-contained HTML page of a report, and rich notebook display.

``collect`` (build.py) gathers the figures from the functions the commands use; html.py writes
them as one page with the Vega libraries embedded once (bundle.py), charts as Vega-Lite specs
(charts.py) and real tables (tables.py, assets/page.js); write.py puts the page in place.
"""

from __future__ import annotations

from nvbridge.page import notebook as notebook  # registers the notebook renderers (nvbridge/output/rich.py)
from nvbridge.page.write import html_of, report

__all__ = ["html_of", "report"]
