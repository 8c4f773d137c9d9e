"""Break opportunities in inline code and C++ signatures, so that a narrow page wraps them between names.

A browser wraps a line only at spaces (and, with the theme's `overflow-wrap: break-word`, inside a word that
does not fit), so `tdb::register_nanobind_error_translator()` or `torch.ones(2, dtype=torch.float16)` broke in
the middle of a name on a phone. After the build, every `<span class="pre">` (Sphinx's inline code and the
signatures' tokens) gets a `<wbr>` after `::`, `/`, `.`, `,`, `(`, `[`, `<` and `=` where a name follows, and
docs/_static/custom.css stops the theme breaking inside names; scripts/check_docs.py fails on a name broken
across lines. Code blocks (`<pre>`) are left alone: Pygments writes no `pre` spans.
"""
from __future__ import annotations

import os
import re

PRE = re.compile(r'(<span class="pre">)([^<]*)(</span>)')
# After a separator, before a name: entities (&lt;) stay whole.
AFTER = re.compile(r"(::|[/.,(\[=]|&lt;)(?=[A-Za-z0-9_])")
# A signature's `::` is a span of its own, followed by the name's span (once: a page can be rewritten twice).
SIG_SCOPE = re.compile(r'(<span class="pre">::</span></span>)(?!<wbr>)')


def add_breaks(html: str) -> str:
    """`html` with a <wbr> at each break opportunity of its inline code and signatures."""
    html = PRE.sub(lambda m: m.group(1) + AFTER.sub(r"\1<wbr>", m.group(2)) + m.group(3), html)
    return SIG_SCOPE.sub(r"\1<wbr>", html)


def on_build_finished(app, exception) -> None:
    """Sphinx's build-finished hook: rewrites the HTML pages of the site (not the theme's files)."""
    if exception is not None or app.builder.format != "html":
        return
    for folder, dirs, files in os.walk(app.outdir):
        dirs[:] = [d for d in dirs if not d.startswith("_")]
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    html = f.read()
                with open(path, "w", encoding="utf-8") as f:
                    f.write(add_breaks(html))
