"""mkdocs hook: the package's docstrings cross-reference in Sphinx's roles (``:func:`edgeprof.x```), which
mkdocstrings leaves as text; on the site they become plain code, ``edgeprof.x``."""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:func|mod|meth|class|data|attr|exc|obj):<code>~?([^<]+)</code>")


def on_page_content(html: str, **kwargs) -> str:
    """The page's HTML with each Sphinx role dropped and its target kept as code."""
    return _ROLE.sub(r"<code>\1</code>", html)
