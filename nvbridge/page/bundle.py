"""The Vega, Vega-Lite and vega-embed JavaScript the page embeds once (no CDN, no network).

vl-convert-python ships the three libraries and bundles them into one script (0.9 MB) that
defines ``vegaEmbed``. Bundling takes about a second, so the result is kept in the user's cache
folder, one file per vl-convert version; where the folder cannot be written, it is bundled
again each time.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from nvbridge.errors import MissingDependency

_bundled: dict[str, str] = {}


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nvbridge"


def script() -> str:
    """The bundle's JavaScript (it sets ``window.vegaEmbed``, ``window.vega``, ``window.vegaLite``).

    Raises:
        MissingDependency: vl-convert-python is not installed.
    """
    try:
        import vl_convert
    except ImportError as exc:
        raise MissingDependency(
            f"nvbridge report needs vl-convert-python, which holds the chart library it embeds ({exc}); "
            "install it with: pip install 'nvbridge[report]'"
        ) from exc
    version = str(getattr(vl_convert, "__version__", "unknown"))
    if version in _bundled:
        return _bundled[version]
    path = _cache_dir() / f"vega-embed-vl-convert-{version}.js"
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = path.read_text("utf-8")
        if text.rstrip().endswith(";"):  # a whole bundle (a torn write never ends in one)
            _bundled[version] = text
            return text
    # its type stub makes the snippet required; without one the bundle sets the globals
    bundle = getattr(vl_convert, "javascript_bundle")  # noqa: B009
    text = str(bundle())
    _bundled[version] = text
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".vega-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return text


def safe_inline(text: str) -> str:
    """``text`` safe inside a ``<script>`` element: no ``</script`` or ``<!--`` can end it early."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")
