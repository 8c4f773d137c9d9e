"""Where inline code, C++ signatures and numbers may break across lines, so that a narrow page wraps them whole.

Inline code wraps whole: a `<code>` of at most WHOLE characters gets the class `whole` (custom.css: no break
inside), so `tdb::explain_refusals(m)` or `tests/test_gpu.py` moves to the next line rather than break at its
`(` or its dot. A longer one breaks at its spaces and, inside a long token (a path, a nested type), after `::`,
`/`, `,` and `[`, never at a dot or after `(` or `<`. The signatures' `::` is a break opportunity of its own.
scripts/check_docs.py fails on inline code broken otherwise. Code blocks (`<pre>`) get none: Pygments writes no
`pre` spans.

A browser also breaks a line after a hyphen, so `--no-build-isolation` broke as `--no-` / `build-isolation` and
`->` as `-` / `>`: each hyphen and what follows it go in a `<span class="nobr">` (custom.css: no break inside),
in inline code and in the blocks that wrap on a phone (sessions, messages: custom.css), which also get break
opportunities between names, so that they wrap there rather than inside a name (`typin|g.DLPackTensorOf`). A
range of numbers in the text (`0.88-1.05x`, `4.38x (2.43-12.13)`, a date) goes in a `<span class="range">`: it
never breaks at its hyphen.

Tables stacked on a phone (custom.css) need their column's name in each cell: label_cells writes it there, and
marks a results table's key column (its ratio: a head with ` / `, `ours / it`) with `data-key`, which a phone
shows right after the row's label.
"""
from __future__ import annotations

import html as html_lib
import os
import re

PRE = re.compile(r'(<span class="pre">)([^<]*)(</span>)')
# After a separator, before a name: entities (&lt;) stay whole. In wrapping code blocks, every separator.
AFTER = re.compile(r"(::|[/.,(\[=]|&lt;)(?=[A-Za-z0-9_])")
# Inside a long token of inline code: after `::`, `/`, `,` and `[` only (never at a dot, after `(` or `<`).
LONG_AFTER = re.compile(r"(::|[/,\[])(?=[A-Za-z0-9_'])")
# Inline code: Sphinx's `<code class="docutils literal ...">` of `pre` spans; WHOLE characters or fewer never break.
CODE = re.compile(r'<code class="(docutils literal[^"]*)">(.*?)</code>', re.S)
WHOLE = 40
# A name of words and hyphens, no space (a mutant's, a conformance case's): in a table's cell it may break at a hyphen.
HYPHENATED = re.compile(r"[\w.:/\[\]]+(?:-[\w.:/\[\]]+)+")
# A range of numbers, outside tags: `0.88-1.05x`, `2.43-12.13`, `2026-11-27`.
RANGE = re.compile(r"(?<![\w.-])(\d[\d.,]*x?-\d[\d.,]*(?:-\d+)?x?)(?![\w-])")
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
# A results table's key column: a ratio, its head `ours / it`, `/ torch's`, `with / without`.
KEY_HEAD = re.compile(r"(^|\s)/\s")


def label_cells(html: str) -> str:
    """Each data cell of a table with a header row gets its column's head as `data-label`: on a phone, where
    custom.css stacks a table's cells one under another, each says which column it is."""
    def table(match: "re.Match[str]") -> str:
        text = match.group(0)
        head = text.split("</thead>")[0] if "</thead>" in text else ""
        labels = [re.sub(r"<[^>]+>", "", h).strip().replace('"', "&quot;") for h in HEAD_CELL.findall(head)]
        if not labels or "data-label=" in text:
            return text

        key = next((i for i, h in enumerate(labels) if i and KEY_HEAD.search(h)), None)

        def row(r: "re.Match[str]") -> str:
            cells = iter(enumerate(labels))

            def cell(c: "re.Match[str]") -> str:
                i, label = next(cells, (None, ""))
                return f'<td data-label="{label}"' + (" data-key" if i == key else "")

            return r.group(1) + DATA_CELL.sub(cell, r.group(2)) + r.group(3)

        return ROW.sub(row, text)

    return TABLE.sub(table, html)


def inline_code(match: "re.Match[str]") -> str:
    """One inline code element: whole (a class) when short, else break opportunities inside its long tokens."""
    classes, body = match.group(1), match.group(2)
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", body))
    if HYPHENATED.fullmatch(text.strip()):  # a name of words and hyphens: in a table's cell it may break at one
        classes += " hyphenated"
    if len(text.strip()) <= WHOLE:
        return f'<code class="{classes} whole">{PRE.sub(lambda m: m.group(1) + join_hyphens(m.group(2)) + m.group(3), body)}</code>'
    body = PRE.sub(lambda m: m.group(1) + join_hyphens(
        LONG_AFTER.sub(r"\1<wbr>", m.group(2)) if len(html_lib.unescape(m.group(2))) > WHOLE else m.group(2))
        + m.group(3), body)
    return f'<code class="{classes}">{body}</code>'


def join_ranges(html: str) -> str:
    """`html` with each range of numbers in its article's text (not in tags, code blocks or scripts) kept whole."""
    def text(m: "re.Match[str]") -> str:
        return m.group(1) + RANGE.sub(r'<span class="range">\1</span>', m.group(2))

    parts = re.split(r"(<pre\b.*?</pre>|<script\b.*?</script>|<style\b.*?</style>)", html, flags=re.S)
    return "".join(p if p.startswith(("<pre", "<script", "<style")) else TEXT.sub(text, p) for p in parts)


def add_breaks(html: str) -> str:
    """`html` with a <wbr> at each break opportunity of its inline code, signatures and wrapping code blocks, its
    hyphens there kept with what follows them, and its ranges of numbers kept whole."""
    if 'class="nobr"' in html or 'class="range"' in html:  # rewritten already
        return html
    html = CODE.sub(inline_code, html)
    # the signatures' tokens (their `pre` spans), which no inline code holds
    html = PRE.sub(lambda m: m.group(0) if "nobr" in m.group(2) else m.group(1) + join_hyphens(m.group(2)) + m.group(3),
                   html)
    html = WRAPPED.sub(lambda m: m.group(1) + wrapped_block(m.group(2)) + m.group(3), html)
    return join_ranges(SIG_SCOPE.sub(r"\1<wbr>", html))


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
