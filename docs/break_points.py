"""Break opportunities in inline code and C++ signatures, so that a narrow page wraps them between names.

A browser wraps a line only at spaces (and, with the theme's `overflow-wrap: break-word`, inside a word that
does not fit), so `tdb::register_nanobind_error_translator()` or `torch.ones(2, dtype=torch.float16)` broke in
the middle of a name on a phone. After the build, every `<span class="pre">` (Sphinx's inline code and the
signatures' tokens) gets a `<wbr>` after `::`, `/`, `.`, `,`, `(`, `[`, `<` and `=` where a name follows, and
docs/_static/custom.css stops the theme breaking inside names; scripts/check_docs.py fails on a name broken
across lines. Code blocks (`<pre>`) get none: Pygments writes no `pre` spans.

A browser also breaks a line after a hyphen, so `--no-build-isolation` broke as `--no-` / `build-isolation` and
`->` as `-` / `>`: each hyphen and what follows it go in a `<span class="nobr">` (custom.css: no break inside),
in inline code and in the blocks that wrap on a phone (sessions, messages: custom.css), which also get the break
opportunities between names, so that they wrap there rather than inside a name (`typin|g.DLPackTensorOf`).

Tables stacked on a phone (custom.css) need their column's name in each cell: label_cells writes it there.
"""
from __future__ import annotations

import os
import re

PRE = re.compile(r'(<span class="pre">)([^<]*)(</span>)')
# After a separator, before a name: entities (&lt;) stay whole.
AFTER = re.compile(r"(::|[/.,(\[=]|&lt;)(?=[A-Za-z0-9_])")
# A signature's `::` is a span of its own, followed by the name's span (once: a page can be rewritten twice).
SIG_SCOPE = re.compile(r'(<span class="pre">::</span></span>)(?!<wbr>)')


# A hyphen and the character after it (a name, another hyphen, `>`), which a browser would break between.
HYPHEN = re.compile(r"(-+(?:&gt;|[A-Za-z0-9_>]))")
# The code blocks that wrap on a phone (custom.css: sessions, messages and plain text), up to their </pre>.
WRAPPED = re.compile(r'(<div class="highlight-(?:text|pycon|pytb|none)\b[^>]*>\s*<div class="highlight"><pre>)'
                     r"(.*?)(</pre>)", re.S)
TEXT = re.compile(r"(^|>)([^<]+)")


def join_hyphens(text: str) -> str:
    """`text` (no tags) with each hyphen kept on one line with what follows it."""
    return HYPHEN.sub(r'<span class="nobr">\1</span>', text)


def wrapped_block(body: str) -> str:
    """A wrapping code block's HTML: break opportunities between names and hyphens joined, in its text only."""
    return TEXT.sub(lambda m: m.group(1) + join_hyphens(AFTER.sub(r"\1<wbr>", m.group(2))), body)


TABLE = re.compile(r"<table\b.*?</table>", re.S)
HEAD_CELL = re.compile(r"<th\b[^>]*>(.*?)</th>", re.S)
ROW = re.compile(r"(<tr\b[^>]*>)(.*?)(</tr>)", re.S)
DATA_CELL = re.compile(r"<td\b")


def label_cells(html: str) -> str:
    """Each data cell of a table with a header row gets its column's head as `data-label`: on a phone, where
    custom.css stacks a table's cells one under another, each says which column it is."""
    def table(match: "re.Match[str]") -> str:
        text = match.group(0)
        head = text.split("</thead>")[0] if "</thead>" in text else ""
        labels = [re.sub(r"<[^>]+>", "", h).strip().replace('"', "&quot;") for h in HEAD_CELL.findall(head)]
        if not labels or "data-label=" in text:
            return text

        def row(r: "re.Match[str]") -> str:
            cells = iter(labels)
            return r.group(1) + DATA_CELL.sub(lambda c: f'<td data-label="{next(cells, "")}"', r.group(2)) + r.group(3)

        return ROW.sub(row, text)

    return TABLE.sub(table, html)


def add_breaks(html: str) -> str:
    """`html` with a <wbr> at each break opportunity of its inline code, signatures and wrapping code blocks, and
    its hyphens there kept with what follows them."""
    if 'class="nobr"' in html:  # rewritten already
        return html
    html = PRE.sub(lambda m: m.group(1) + join_hyphens(AFTER.sub(r"\1<wbr>", m.group(2))) + m.group(3), html)
    html = WRAPPED.sub(lambda m: m.group(1) + wrapped_block(m.group(2)) + m.group(3), html)
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
                    f.write(label_cells(add_breaks(html)))
