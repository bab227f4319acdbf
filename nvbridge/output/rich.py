"""Rich display in notebooks without the analysis importing the page builder above it.

``Report``, ``Summary``, advise's ``Advice`` and ``Diff`` have ``_repr_html_`` (Jupyter, VS Code
and marimo call it); it asks :func:`html` here, and nvbridge/page/notebook.py registers the
renderers when it is imported (``import nvbridge.page``, ``nvbridge.report``, and
``nvbridge.load``/``summarize`` in a running IPython). Until then there is no renderer, ``html``
returns None, and the notebook shows the plain ``repr``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Renderer = Callable[[Any], str]
_RENDERERS: dict[str, Renderer] = {}


def register(kind: str, renderer: Renderer) -> None:
    """Draw objects of ``kind`` ("report", "summary", "advice", "diff") with ``renderer``."""
    _RENDERERS[kind] = renderer


def html(kind: str, value: object) -> str | None:
    """``value``'s HTML, or None (the notebook's plain repr) where no renderer is registered."""
    renderer = _RENDERERS.get(kind)
    return None if renderer is None else renderer(value)
