#!/usr/bin/env python3
"""Checks the built documentation as a reader's browser sees it.

    python scripts/check_docs.py [HTML_DIR] [--screenshots DIR] [--chromium PATH]

Serves HTML_DIR (default docs/_build/html, what `sphinx-build -W --keep-going docs docs/_build/html` writes) on
127.0.0.1 only, at a free port, and opens every page in headless Chromium (Debian's `chromium` package), driven
by subprocess: `--dump-dom` gives the page as the browser rendered it, `--screenshot` an image of the main pages.
No Python dependency beyond the standard library (http.server serves, html.parser reads the DOM).

Fails (exit 1, one line per problem) on:
- a page that does not load: an HTTP error, Chromium failing, or a rendered page without its main element or
  (but for the search page) a heading;
- a broken internal link: an <a href> to a page of the site that does not exist, or to a #fragment that is not
  an id of the target page;
- a code block (<pre>) with a line wider than 90 columns (MAX_CODE_COLUMNS), which a laptop's page width
  cuts off;
- a C++ reference page (reference/cpp/*) without a code block where its headers' doc comments have examples
  (\\code), i.e. examples flattened into prose, or with a code block highlighted by the site's default lexer
  (Python: a `\\code` without `{.cpp}`);
- prose that renders broken: a backtick left in a paragraph's text (outside code), an opening quote (‘ or “) with
  no closing one, or an odd number of straight double quotes in one block (a paragraph, list item, table cell,
  definition or heading), as a doc comment's nested quotes or a quoted string broken over two lines leave them;
- a table row that is a heading among the data (a first cell and nothing else: a group's title as a row), a
  C++ signature that shows an internal name (`detail::`), and, anywhere on a C++ reference page, a name the
  headers declare only in their `namespace detail` (`autograd_refuses_write`): what the reference shows is public
  API;
- emphasis made of a dunder's name: a `__name__` that a header's doc comment or a page writes outside code, which
  Doxygen and Markdown render as bold or italic "name";
- a table that overflows the viewport at 390 or 1280 px (WIDTHS), measured in Chromium: it must fit, or scroll
  inside a box of its own (an ancestor with overflow-x: auto) that fits, with its first column inside that box;
  at 1280 px (DESKTOP) it must fit its column without scrolling;
- at either width, measured in Chromium: a name in inline code, a C++ signature or a code block that wraps (a
  session, a message) broken across two lines between two word characters (`ValueErro|r`) or, outside tables'
  cells, after a hyphen (`--no-|build-isolation`, `-|>`; docs/break_points.py gives them break points between
  names and keeps hyphens with what follows), a table cell whose content runs past its column and a code block
  whose lines run past its box without scrolling, an error example (a code block with an exception's or a
  refusal's line) wider than its box, so that its reason line is off-screen, and an anchor target (a section, a
  label, a reference entry) whose heading a jump to it leaves under the sticky header;
- issue 61's, measured at both widths: inline code broken at a dot or after `(` or `<` (`tests/test_gpu.|py`,
  `to_dlpack(|t)`, `ndim<|1>`), inline code of MAX_WHOLE characters or fewer split at all (it wraps whole), a
  range of numbers broken at its hyphen (`(2.43-|12.13)`), anywhere but code blocks; on a phone a page's table that
  scrolls sideways (it stacks), and a results table whose key column (a ratio: its head `ours / it`) is off screen
  or, stacked, not read right after the row's label; a table cell more than MAX_CELL_LINES lines tall; a chart
  shown below MIN_CHART_SCALE of its width with no box to scroll it in;
- words a reader should not meet: the implementation's (IMPLEMENTATION_WORDS: `load() returns false`,
  `cast_flags`, `vectorcall dispatcher`, a call's `record`, `lent`) on the reference, limitations and guarantees
  pages; a generator's leftovers anywhere (a raw `RuntimeError: ...` in the text, a measurement of `0 slices`, the
  benchmark scripts' goal notes); a topic under another's heading (a section's one bold lead-in, `**Accessors.**`
  under "Names"); and a page whose title the links to it do not say (`limitations` for "Choices and ...");
- a missing image: an <img src> or <object data> (the Graphviz diagrams) that the server does not have, or that
  is empty or not an image; and any request Chromium made while rendering a page that the server answered with
  an error (stylesheets, scripts and images as the browser asked for them).
External links are not followed (the check runs without network). Screenshots go to docs/_build/screenshots
(not in git); exit 2 when Chromium is not installed.
"""
from __future__ import annotations

import argparse
import functools
import html
import html.parser
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Dict, List, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The pages a reader lands on first, screenshot in this order.
MAIN_PAGES = ["index.html", "getting-started.html", "guides/first-kernel.html", "how-it-works.html",
              "guides/kernel-authors.html", "reference/cpp/tensor.html", "reference/cpp/output.html",
              "reference/cpp/bindings.html",
              "guides/build-cache.html", "reference/cpp.html", "reference/python.html", "benchmarks.html",
              "guarantees.html", "support.html", "conformance.html"]
SKIP_DIRS = ("_static", "_images", "_sources", "_downloads")
MAX_CODE_COLUMNS = 90
# Inline code of at most this many characters never breaks across lines (it wraps whole: a phone's line holds 44).
MAX_WHOLE = 40
# A table cell taller than this many lines of text is a paragraph: it belongs on a page of its own.
MAX_CELL_LINES = 15
# A chart (an image) shown at less than this share of its width, with no box to scroll it in, cannot be read.
MIN_CHART_SCALE = 0.5
# Screenshot and table-measurement widths: a laptop's and a phone's.
WIDTHS = {"": 1280, "-phone": 390}
DESKTOP = 1280  # from this width on, a table must fit its column without scrolling
# Served with ?MEASURE, a page is a frame per width of WIDTHS around the page itself carrying MEASURE_SCRIPT
# (?MEASURE_INNER): after load, each frame writes its tables' fit into the outer page's DOM. Frames, because
# headless Chromium lays a window out at no less than 500 px.
MEASURE, MEASURE_INNER = "check-docs-measure", "check-docs-measure-frame"
MEASURE_SCRIPT = b"""<script>
const MAX_WHOLE = @MAX_WHOLE@, MAX_CELL_LINES = @MAX_CELL_LINES@, MIN_CHART_SCALE = @MIN_CHART_SCALE@;
window.addEventListener("load", () => {
  const width = document.documentElement.clientWidth, found = [], page = document.documentElement.outerHTML;
  for (const table of document.querySelectorAll("table")) {
    // The box a reader sees the table in: its nearest ancestor that scrolls or clips sideways, else itself.
    let box = table;
    for (let e = table.parentElement; e && e !== document.body; e = e.parentElement) {
      if (getComputedStyle(e).overflowX !== "visible") { box = e; break; }
    }
    const b = box.getBoundingClientRect(), cell = table.querySelector("tr > *");
    const first = cell ? cell.getBoundingClientRect() : b;
    // The key column: a ratio (its head "ours / it", "/ torch's"), the point of a results table. In the first data
    // row: is its cell inside the box and the viewport, and is it the first cell read after the row's label?
    const heads = [...table.querySelectorAll("thead th")].map(th => th.textContent.trim());
    const keyAt = heads.findIndex((h, i) => i > 0 && /(^|\\s)\\/\\s/.test(h));
    const row = [...table.querySelectorAll("tbody tr")].find(tr => tr.children.length === heads.length);
    let key = null;
    if (keyAt > 0 && row) {
      const cells = [...row.children].map(c => c.getBoundingClientRect()), k = cells[keyAt];
      const others = cells.filter((c, i) => i > 0 && i !== keyAt && c.height);
      key = {head: heads[keyAt].slice(0, 40), visible: k.left >= Math.max(0, b.left) - 1 &&
               k.right <= Math.min(width, b.right) + 1 && k.width > 0,
             second: others.every(c => k.top < c.top + 1 && (k.top < c.top - 1 || k.left <= c.left))};
    }
    found.push({label: (cell ? cell.textContent : "").trim().slice(0, 40), width: Math.round(width),
                box_left: Math.floor(b.left), box_right: Math.ceil(b.right), table_width: Math.ceil(table.scrollWidth),
                box_width: Math.floor(box.clientWidth), scrolls: box !== table &&
                  ["auto", "scroll"].includes(getComputedStyle(box).overflowX),
                first_right: Math.ceil(first.right - b.left), key, page_table: table.classList.contains("docutils")});
  }
  // Identifiers broken across two lines (inline code, C++ signatures, code blocks that wrap): a line break between
  // two word characters, or, but in a table's cell, after a hyphen (`--no-|build-isolation`, `-|>`), wherever the
  // text nodes split.
  const breaks = [], word = /[A-Za-z0-9_]/, joined = /[A-Za-z0-9_>-]/, range = document.createRange();
  const roots = [...document.querySelectorAll("article code, article dt.sig")].filter(e => !e.closest("pre"))
    .concat([...document.querySelectorAll("article pre")].filter(
      e => ["pre-wrap", "break-spaces", "pre-line"].includes(getComputedStyle(e).whiteSpace)));
  const lineCount = root => {  // the lines a piece of text is laid out on
    const tops = [], nodes = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = nodes.nextNode(); n; n = nodes.nextNode()) {
      range.selectNodeContents(n);
      for (const r of range.getClientRects())
        if (r.height && r.width && !tops.some(t => Math.abs(t - r.top) < r.height / 2)) tops.push(r.top);
    }
    return tops.length;
  };
  for (const root of roots) {
    range.selectNodeContents(root);
    if (range.getClientRects().length < 2 && root.tagName !== "PRE") continue;  // on one line
    const cell = root.closest("td, th");  // in a table's cell a long name-with-hyphens may break at one
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    // Inline code wraps whole: a short one (MAX_WHOLE characters) on one line, a longer one never at a dot or after
    // `(` or `<` (`tests/test_gpu.|py`, `to_dlpack(|t)`, `ndim<|1>`).
    const inline = root.tagName === "CODE", whole = root.textContent.trim().length <= MAX_WHOLE;
    const hyphenated = cell && /^[\\w.:\\/\\[\\]]+(-[\\w.:\\/\\[\\]]+)+$/.test(root.textContent.trim());
    if (inline && whole && !hyphenated && lineCount(root) > 1) {
      breaks.push(`${root.textContent.trim()} (inline code of ${root.textContent.trim().length} characters, ` +
                  "split: it wraps whole)");
      continue;
    }
    let top = null, before = "", text = "";
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.data.length; i++) {
        const c = node.data[i], previous = before;
        text += c;
        before = c;
        if (c === "\\n") { top = null; continue; }  // a line of the block's own
        if (!c.trim()) continue;
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const r = range.getBoundingClientRect();
        if (!r.height) continue;
        if (top !== null && r.top > top + r.height / 2 &&
            ((word.test(previous) && word.test(c)) || (previous === "-" && joined.test(c) && !cell) ||
             (inline && !hyphenated && (previous === "." || (c === "." && previous.trim()) || previous === "(" ||
                                        previous === "<"))))
          breaks.push(text.slice(Math.max(0, text.length - 31), text.length - 1) + "|" + node.data.slice(i, i + 12));
        top = r.top;
      }
    }
  }
  // A range (`2.43-12.13`, `2026-11-27`) broken at its hyphen, anywhere in the text but code blocks.
  const texts = document.createTreeWalker(document.querySelector("article") || document.body, NodeFilter.SHOW_TEXT);
  for (let node = texts.nextNode(); node; node = texts.nextNode()) {
    if (node.parentElement.closest("pre, script, style")) continue;
    for (const m of node.data.matchAll(/\\d-(?=\\d)/g)) {
      const at = m.index + 1;
      range.setStart(node, at);
      range.setEnd(node, at + 1);
      const hyphen = range.getBoundingClientRect();
      range.setStart(node, at + 1);
      range.setEnd(node, at + 2);
      const next = range.getBoundingClientRect();
      if (hyphen.height && next.top > hyphen.top + hyphen.height / 2)
        breaks.push(node.data.slice(Math.max(0, at - 20), at + 1) + "|" + node.data.slice(at + 1, at + 12) +
                    " (a range broken at its hyphen)");
    }
  }
  // Table cells taller than MAX_CELL_LINES lines (a paragraph in a cell: it belongs on a page of its own), and charts
  // (images) shrunk below half their size with no box to scroll them in.
  const tall = [];
  for (const cell of document.querySelectorAll("article table.docutils :is(td, th)")) {
    const style = getComputedStyle(cell), line = parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize);
    range.selectNodeContents(cell);  // its content's height: the cell itself is as tall as its row
    const lines = Math.round(range.getBoundingClientRect().height / line);
    if (lines > MAX_CELL_LINES) tall.push(`${lines} lines: ${cell.textContent.trim().slice(0, 50)}`);
  }
  const charts = [];
  for (const img of document.querySelectorAll("article img")) {
    let scrolls = false;
    for (let e = img.parentElement; e && !["ARTICLE", "BODY"].includes(e.tagName); e = e.parentElement)
      scrolls = scrolls || ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
    if (img.naturalWidth && img.clientWidth < img.naturalWidth * MIN_CHART_SCALE && !scrolls)
      charts.push(`${img.getAttribute("src")} at ${Math.round(100 * img.clientWidth / img.naturalWidth)}% ` +
                  `(${img.clientWidth} of ${img.naturalWidth} px)`);
  }
  // Table cells whose content runs past their column (into the next one, or out of the table), and code blocks
  // whose lines run past their box without scrolling in it.
  const overflows = [];
  for (const cell of document.querySelectorAll("article td, article th")) {
    if (cell.scrollWidth > cell.clientWidth + 1)
      overflows.push(`a table cell (${cell.scrollWidth} px of content in ${cell.clientWidth}): ` +
                     cell.textContent.trim().slice(0, 50));
  }
  for (const pre of document.querySelectorAll("article pre")) {
    if (pre.scrollWidth > pre.clientWidth + 1 && getComputedStyle(pre).overflowX === "visible")
      overflows.push(`a code block (${pre.scrollWidth} px of lines in ${pre.clientWidth}): ` +
                     pre.textContent.trim().slice(0, 50));
  }
  // Error examples (a block with an exception's or a refusal's line) wider than their box: the reason is off-screen.
  const error = /^\\s*([A-Za-z_.]*(Error|Exception|Warning)(:|$)|overload \\d+: argument|argument '|Why the )/m;
  const errors = [...document.querySelectorAll("article pre")].filter(
    pre => error.test(pre.textContent) && pre.scrollWidth > pre.clientWidth + 1).map(
    pre => pre.textContent.split("\\n").find(line => error.test(line)).trim().slice(0, 60));
  // Anchor jumps: each target (a section, a label, a reference entry) jumped to as a link does, where its heading
  // lands against what sticks to the top of the window (Furo's header on a phone).
  const hidden = [];
  document.documentElement.style.scrollBehavior = "auto";  // the jump's end, not its animation
  const sticky = [...document.querySelectorAll("body *")].filter(
    e => ["sticky", "fixed"].includes(getComputedStyle(e).position));
  for (const target of [...document.querySelectorAll("article [id]")].filter(
         e => e.matches("section, dt, span:empty")).slice(0, 200)) {
    location.hash = target.id;
    const box = target.matches("span") ? target.parentElement : target;
    const heading = target.matches("dt") ? target : box.querySelector("h1, h2, h3, h4, h5, h6") || box;
    const cover = Math.max(0, ...sticky.map(e => e.getBoundingClientRect()).filter(
      b => b.top <= 1 && b.bottom > 0 && b.height < innerHeight / 3 && b.left < width / 2 && b.right > width / 2)
      .map(b => b.bottom));
    const top = heading.getBoundingClientRect().top;
    if (top < cover - 1) hidden.push(`#${target.id} (its top at ${Math.round(top)} px, under ${Math.round(cover)} px)`);
  }
  history.replaceState(null, "", location.pathname + location.search);
  const out = parent.document.createElement("div");
  out.className = "check-docs-measure";
  out.setAttribute("data-width", width);
  out.setAttribute("data-tables", JSON.stringify(found));
  out.setAttribute("data-layout", JSON.stringify({breaks, errors, hidden, overflows, tall, charts}));
  if (width === Math.max(...[...parent.document.querySelectorAll("iframe")].map(f => f.clientWidth)))
    out.setAttribute("data-page", page);  // the page's DOM as rendered, once: the checks that read it
  parent.document.body.appendChild(out);
});
</script>""".replace(b"@MAX_WHOLE@", b"%d" % MAX_WHOLE).replace(
    b"@MAX_CELL_LINES@", b"%d" % MAX_CELL_LINES).replace(b"@MIN_CHART_SCALE@", repr(MIN_CHART_SCALE).encode())
HEADERS = os.path.join(ROOT, "torch_dlpack_bridge", "include", "torch_dlpack_bridge")
# Blocks whose text prose_problems reads, and the elements whose text is code, not prose.
PROSE_BLOCKS = {"p", "li", "dd", "dt", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "figcaption", "caption"}
NOT_PROSE = {"pre", "code", "kbd", "samp", "tt", "script", "style"}


class Recorder(http.server.SimpleHTTPRequestHandler):
    """Serves the site and records every request's status (what Chromium asked for and got)."""

    requests: List[Tuple[str, int]] = []
    lock = threading.Lock()

    def log_request(self, code="-", size="-"):
        with self.lock:
            self.requests.append((urllib.parse.unquote(self.path.split("?")[0]), int(code)))

    def log_message(self, format, *args):  # quiet
        pass

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if query not in (MEASURE, MEASURE_INNER) or not path.endswith(".html"):
            return super().do_GET()
        try:
            with open(self.translate_path(path), "rb") as f:
                body = f.read().replace(b"</body>", MEASURE_SCRIPT + b"</body>", 1)
        except OSError:
            return self.send_error(404)
        if query == MEASURE:
            frames = "".join(f'<iframe src="{html.escape(path)}?{MEASURE_INNER}" style="display:block; border:0; '
                             f'width:{w}px; height:1600px"></iframe>' for w in WIDTHS.values())
            body = f"<!DOCTYPE html><html><body>{frames}</body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class DomReader(html.parser.HTMLParser):
    """Ids, headings, links and images of one rendered page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: Set[str] = set()
        self.links: List[str] = []
        self.images: List[str] = []
        self.headings = 0
        self.main = 0
        self.code_blocks: List[str] = []  # the text of every <pre>
        self.tables: Dict[int, List[Dict[str, object]]] = {}  # {width: MEASURE_SCRIPT's findings}
        self.layout: Dict[int, Dict[str, List[str]]] = {}  # {width: {"breaks": ..., "errors": ..., "hidden": ...}}
        self.page = ""  # in the outer page of a measurement: the rendered page's own DOM
        self.plain_highlights = 0  # code blocks highlighted with the site's default lexer (Python)
        self.prose: List[str] = []  # the text of every block (PROSE_BLOCKS) outside code, nested blocks apart
        self._pre = 0
        self._code = 0
        self._blocks: List[str] = []
        self.heading_rows: List[str] = []  # data rows with only their first cell filled
        self.internal_signatures: List[str] = []  # C++ signatures (<dt class="sig ...">) that name detail::
        self._row: Optional[List[str]] = None
        self._sig: Optional[str] = None
        self.emphasis: List[str] = []  # the text of every <strong> and <em> outside code
        self._emphasis: List[str] = []
        self.text: List[str] = []  # every piece of text in the page's <article> (the page itself, not the theme's)
        self._article = 0
        self.title = ""  # the page's <h1>
        self._h1 = False
        self.article_links: List[Tuple[str, str]] = []  # (href, text) of the links in the page's <article>
        self._link: Optional[List[str]] = None
        # Per <section>: its heading, its paragraphs, and the run-in headings (a paragraph opening with bold text
        # ending in "." or ":", `**Accessors.** t.view() gives...`) with the paragraph's index.
        self.sections: List[Dict[str, object]] = []
        self._sections: List[Dict[str, object]] = []
        self._p_fresh = False
        self._lead: Optional[str] = None

    def handle_endtag(self, tag):
        if tag == "h1":
            self._h1 = False
        if tag == "a" and self._link is not None:
            self.article_links.append((self._link[0], " ".join(self._link[1].split())))
            self._link = None
        if tag in ("h2", "h3", "h4", "h5", "h6") and self._sections and self._sections[-1].get("_in_heading"):
            section = self._sections[-1]
            section["heading"], section["_in_heading"] = " ".join(str(section["_heading"]).split()).rstrip("#¶"), False
        if tag == "strong" and self._lead is not None:
            lead, self._lead = " ".join(self._lead.split()), None
            if self._sections and lead.endswith((".", ":", "?")):
                self._sections[-1]["leads"].append((lead, self._sections[-1]["paragraphs"]))
        if tag == "section" and self._sections:
            self.sections.append(self._sections.pop())
        if tag in ("strong", "em") and self._emphasis and self._sig is None:
            self.emphasis.append(self._emphasis.pop())
        if tag == "article" and self._article:
            self._article -= 1
        if tag == "pre" and self._pre:
            self._pre -= 1
        if tag in NOT_PROSE and self._code:
            self._code -= 1
        if tag in PROSE_BLOCKS and self._blocks:
            self.prose.append(self._blocks.pop())
        if tag == "tr" and self._row is not None:
            cells, self._row = [" ".join(c.split()) for c in self._row], None
            if len(cells) > 1 and cells[0] and not any(cells[1:]):
                self.heading_rows.append(cells[0])
        if tag == "dt" and self._sig is not None:
            if "detail::" in self._sig:
                self.internal_signatures.append(" ".join(self._sig.split()))
            self._sig = None

    def handle_data(self, data):
        if self._h1:
            self.title += data
        if self._link is not None:
            self._link[-1] += data
        if self._lead is not None:
            self._lead += data
        elif self._p_fresh and data.strip():
            self._p_fresh = False
        if self._sections and self._sections[-1]["heading"] is None and self._sections[-1].get("_in_heading"):
            self._sections[-1]["_heading"] += data
        if self._emphasis and not self._code:
            self._emphasis[-1] += data
        if self._article:
            self.text.append(data)
        if self._pre:
            self.code_blocks[-1] += data
        if self._blocks and not self._code:
            self._blocks[-1] += data
        if self._row:
            self._row[-1] += data
        if self._sig is not None:
            self._sig += data

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "h1" and self._article and not self.title:
            self._h1 = True
        if tag == "a" and self._article:
            self._link = [a.get("href") or "", ""]
        if tag == "section" and self._article:
            self._sections.append({"heading": None, "_heading": "", "paragraphs": 0, "leads": []})
        if tag in ("h2", "h3", "h4", "h5", "h6") and self._sections and self._sections[-1]["heading"] is None:
            self._sections[-1]["_in_heading"] = True
        if tag == "p" and self._sections and not self._code:
            self._sections[-1]["paragraphs"] += 1
            self._p_fresh = True
        if tag == "strong" and self._p_fresh:
            self._lead, self._p_fresh = "", False
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        if tag in ("h1", "h2"):
            self.headings += 1
        if tag in ("strong", "em") and self._sig is None:  # a signature's <em> is a parameter's name
            self._emphasis.append("")
        if tag == "article":
            self._article += 1
        if tag in NOT_PROSE:
            self._code += 1
        if tag in PROSE_BLOCKS:
            self._blocks.append("")
        if tag == "tr":
            self._row = []
        if tag == "td" and self._row is not None:  # data cells only: a header row may leave cells empty
            self._row.append("")
        if tag == "dt" and "sig" in (a.get("class") or "").split():
            self._sig = ""
        if tag == "div" and "highlight-default" in (a.get("class") or "").split():
            self.plain_highlights += 1
        if tag == "pre":
            self._pre += 1
            if self._pre == 1:
                self.code_blocks.append("")
        if "check-docs-measure" in (a.get("class") or "").split():
            self.tables[int(a.get("data-width") or 0)] = json.loads(a.get("data-tables") or "[]")
            self.layout[int(a.get("data-width") or 0)] = json.loads(a.get("data-layout") or "{}")
            self.page = a.get("data-page") or self.page
        if tag == "main" or a.get("role") == "main":
            self.main += 1
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])
        if tag == "object" and a.get("data"):
            self.images.append(a["data"])


def code_problems(page: str, dom: DomReader, examples_of: Dict[str, bool]) -> List[str]:
    """Code blocks wider than MAX_CODE_COLUMNS; a reference page without code where its headers have examples.
    Every page, the examples and outputs included, fails on a wider block.
    """
    problems = []
    for block in dom.code_blocks:
        wide = [line for line in block.splitlines() if len(line) > MAX_CODE_COLUMNS]
        if wide:
            problems.append(f"{page}: a code block has {len(wide)} line(s) wider than {MAX_CODE_COLUMNS} columns, "
                            f"e.g. {wide[0][:60]!r}... ({len(wide[0])})")
    name = os.path.splitext(os.path.basename(page))[0]
    if page.startswith("reference/cpp/") and examples_of.get(name) and not dom.code_blocks:
        problems.append(f"{page}: no code block, but the headers it shows have examples (\\code)")
    if page.startswith("reference/cpp/") and dom.plain_highlights:
        problems.append(f"{page}: {dom.plain_highlights} code block(s) highlighted as Python, the site's default "
                        "(write \\code{.cpp} in the header)")
    return problems


def prose_problems(page: str, dom: DomReader) -> List[str]:
    """Blocks of rendered text with a stray backtick or an unbalanced quote (code is not prose: left out).
    Smart quotes make an apostrophe a closing ’, so a ‘ must be closed, while a ’ may stand alone."""
    problems = []
    for text in dom.prose:
        found = []
        if "`" in text:
            found.append("a backtick")
        open_single = 0
        for ch in text:
            if ch == "\u2018":
                open_single += 1
            elif ch == "\u2019" and open_single:
                open_single -= 1
        if open_single:
            found.append("an opening quote ‘ never closed")
        if text.count("\u201c") != text.count("\u201d"):
            found.append(f"{text.count(chr(0x201c))} “ against {text.count(chr(0x201d))} ”")
        if text.count('"') % 2:
            found.append('an odd number of "')
        if found:
            problems.append(f"{page}: rendered text with {' and '.join(found)}: {' '.join(text.split())[:160]!r}")
    return problems


def reference_problems(page: str, dom: DomReader, dunders: Optional[Set[str]] = None) -> List[str]:
    """Table rows that are headings among the data; signatures that show internals; emphasis made of a dunder's
    name (its underscores read as emphasis by Doxygen or Markdown: `__torch_function__` written outside code
    renders as bold "torch_function"; `dunders`: the names written so, by default those of the sources); on the C++
    reference's pages, a name of the headers' internals (namespace detail) anywhere in the text."""
    problems = [f"{page}: a table row with only its first cell filled, a heading among the data: {r[:60]!r}"
                for r in dom.heading_rows]
    problems += [f"{page}: the reference shows an internal name (detail::): {s[:100]!r}"
                 for s in dom.internal_signatures]
    dunders = source_dunders() if dunders is None else dunders
    problems += [f"{page}: emphasis made of a dunder's name: {e!r} (__{e}__ written outside code: write it as code)"
                 for e in (" ".join(e.split()) for e in dom.emphasis) if e in dunders]
    if page.startswith("reference/cpp"):
        text = "".join(dom.text)
        problems += [f"{page}: the public reference names an internal of the headers (namespace detail): {n!r}"
                     for n in sorted(internal_names()) if re.search(rf"(?<![\w:]){re.escape(n)}\b", text)]
    return problems


# Words of the headers' implementation that a reader of the reference, the limitations or the guarantees cannot act
# on (how the casters and the refusal notes work inside): say what the reader sees instead.
IMPLEMENTATION_WORDS = [r"\bload\(\)", r"\bfrom_python\(\)", r"\bcast_flags\b", r"\binnermost\b",
                        r"\bputs? it back\b", r"\bvectorcall\b", r"\bdispatcher\b", r"\brecord open\b",
                        r"\b(?:call's|own|its|the) record\b", r"\blent\b", r"\bthread-local\b",
                        r"__tls_get_addr"]
# The pages that must hold none: the reference, the limitations, the guarantees (and their detail page).
PLAIN_PAGES = re.compile(r"^(reference/|limitations\.html$|guarantees)")
# Text a generator left that is not for the reader: an exception's raw message in prose, a measurement over zero
# samples, the benchmark scripts' own notes on their goals.
NOT_FOR_READERS = [
    (re.compile(r"\b[A-Z]\w*(?:Error|Exception): [a-z]"), "a raw exception message in the text"),
    (re.compile(r"(?<![\d.,])0 (?:slices|rounds|runs|processes|samples|repeats) of\b"), "a measurement of zero samples"),
    (re.compile(r"\b(?:Not a goal|[Ff]or the reader\b|Goal met|Goal not met)"), "a note of the scripts' goals"),
]


def page_problems(page: str, dom: DomReader) -> List[str]:
    """Words a reader should not meet: implementation words on the plain pages (IMPLEMENTATION_WORDS), text left by
    a generator (NOT_FOR_READERS), and a topic under another's heading: a section whose one run-in heading (a bold
    lead-in, not its first paragraph's) names what the section's heading does not."""
    problems = []
    if PLAIN_PAGES.match(page):
        text = " ".join("".join(dom.text).split())
        for pattern in IMPLEMENTATION_WORDS:
            for found in re.finditer(pattern, text):
                context = text[max(0, found.start() - 50):found.end() + 30]
                problems.append(f"{page}: an implementation word, {found.group(0)!r}: ...{context}... (say what the "
                                "reader sees)")
    for block in dom.prose:
        block = " ".join(block.split())
        for pattern, what in NOT_FOR_READERS:
            if pattern.search(block):
                problems.append(f"{page}: {what}: {block[:120]!r}")
    for section in dom.sections:
        leads = section["leads"]
        heading = str(section["heading"] or "")
        if heading and len(leads) == 1 and leads[0][1] > 1 and not _shares_word(leads[0][0], heading):
            problems.append(f"{page}: a topic under another's heading: {leads[0][0]!r} in the section {heading!r} "
                            "(give it a heading of its own)")
    return problems


COMMON_WORDS = {"the", "and", "for", "its", "what", "not", "yet", "how", "with", "one", "all", "this", "that"}


def _stems(text: str) -> Set[str]:
    """The words of a title or a link's text, each by its first five letters (`limitation`, `limitations`)."""
    return {w[:5] for w in re.findall(r"[a-z+]{3,}", text.lower()) if w not in COMMON_WORDS}


def _shares_word(a: str, b: str) -> bool:
    return bool(_stems(a) & _stems(b))


def title_problems(doms: Dict[str, DomReader]) -> List[str]:
    """A page that the links of other pages call by a name its title does not have (`limitations` for a page
    titled "Choices and what is not supported yet"): two or more links to the page itself (no #section), none of
    whose texts shares a word with the title."""
    texts: Dict[str, List[str]] = {}
    for page, dom in doms.items():
        for href, text in dom.article_links:
            target = urllib.parse.urlsplit(href)
            if target.scheme or target.netloc or target.fragment or not target.path.endswith(".html") or not text:
                continue
            rel = os.path.normpath(os.path.join(os.path.dirname(page), target.path)).replace(os.sep, "/")
            if rel != page:
                texts.setdefault(rel, []).append(text)
    problems = []
    for rel, said in sorted(texts.items()):
        title = " ".join(doms[rel].title.split()).rstrip("#¶") if rel in doms else ""
        if title and len(said) >= 2 and not any(_shares_word(t, title) for t in said):
            problems.append(f"{rel}: its title is {title!r}, but the links to it say {sorted(set(said))[:4]}")
    return problems


def unquoted_dunders(text: str) -> Set[str]:
    """The names of the dunders (`__dlpack__`: dlpack) that `text`, a header or a Markdown page, writes outside
    code: not in backticks, a fenced block or a \\code block, where the underscores would be read as emphasis."""
    if "/*!" in text:  # a header: its doc comments only
        text = " ".join(re.findall(r"/\*!(.*?)\*/", text, flags=re.S))
    text = re.sub(r"\\code.*?\\endcode|^(```|~~~).*?^\1", " ", text, flags=re.S | re.M)
    text = re.sub(r"``.*?``|`[^`]*`", " ", text, flags=re.S)  # a code span may go over two lines
    return set(re.findall(r"(?<![\w])__([A-Za-z][A-Za-z0-9_]*[A-Za-z0-9])__(?!\w)", text))


@functools.lru_cache(maxsize=None)
def source_dunders() -> Set[str]:
    """unquoted_dunders() of every source the site renders: the headers, the pages, and the Markdown they include
    (benchmarks/, tests/)."""
    found: Set[str] = set()
    sources = [(HEADERS, ".h"), (os.path.join(ROOT, "docs"), ".md"), (os.path.join(ROOT, "benchmarks"), ".md"),
               (os.path.join(ROOT, "tests"), ".md")]
    for folder, suffix in sources:
        for path, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if d != "_build"]
            for name in files:
                if name.endswith(suffix):
                    with open(os.path.join(path, name), encoding="utf-8") as f:
                        found |= unquoted_dunders(f.read())
    return found


def _cpp_code(source: str) -> str:
    """A header's source without comments, string and character literals, and preprocessor lines."""
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    source = re.sub(r"//[^\n]*", "", source)
    source = re.sub(r'R"(\w*)\((.*?)\)\1"', '""', source, flags=re.S)
    source = re.sub(r'"(\\.|[^"\\\n])*"', '""', source)
    source = re.sub(r"'(\\.|[^'\\\n])*'", "''", source)
    return re.sub(r"^\s*#.*$", "", source, flags=re.M)


def _declared(statement: str) -> Optional[str]:
    """The name a namespace-level declaration or definition (its text before `;` or `{`) declares, if any."""
    s = " ".join(re.sub(r"template\s*<[^;{}]*?>\s*(?=[a-zA-Z])", "", statement).split())
    for pattern in (r"\b(?:struct|class|union|enum)\s+(?:class\s+)?(?:\w+\s+)*?(\w+)\s*(?::[^:]|$)",
                    r"^using\s+(\w+)\s*=", r"^(?:[\w:<>,*&]+\s+)+[*&]*(~?\w+)\s*\(",
                    r"^(?:[\w:<>,*&]+\s+)+[*&]*(\w+)\s*(?:\[[^\]]*\])*\s*(?:=.*)?$"):
        found = re.search(pattern, s)
        if found:
            return found.group(1)
    return None


@functools.lru_cache(maxsize=None)
def internal_names() -> Set[str]:
    """Names the headers declare only in a `namespace detail` (functions, types, constants), which the public
    reference must not show; those that read as words (`explain`, `bound`) are left out, keeping the ones with an
    underscore or an inner capital (`autograd_refuses_write`, `AutogradProbe`)."""
    internal: Set[str] = set()
    public: Set[str] = set()
    for header in sorted(os.listdir(HEADERS)):
        if not header.endswith(".h"):
            continue
        with open(os.path.join(HEADERS, header), encoding="utf-8") as f:
            code = _cpp_code(f.read())
        for opening in re.finditer(r"namespace\s+(\w+)\s*\{", code):
            depth, statement, statements = 1, [], []
            for c in code[opening.end():]:
                if c == "{":
                    if depth == 1:
                        statements.append("".join(statement))
                        statement = []
                    depth += 1
                elif c == "}":
                    depth -= 1
                    statement = [] if depth == 1 else statement
                    if depth == 0:
                        break
                elif c == ";" and depth == 1:
                    statements.append("".join(statement))
                    statement = []
                elif depth == 1:
                    statement.append(c)
            names = {_declared(t) for t in statements if t.strip() and not t.strip().startswith("namespace")}
            (internal if opening.group(1) == "detail" else public).update(n for n in names if n)
    return {n for n in internal - public if "_" in n.strip("_") or re.search(r"[a-z][A-Z]", n)}


def table_problems(page: str, tables: List[Dict[str, object]]) -> List[str]:
    """Tables a reader cannot see whole: the box showing one (the table, or the scrolling box around it) is wider
    than the viewport, or it clips the table without scrolling, or the first column does not fit in it."""
    problems = []
    for t in tables:
        where = f"{page}: at {t['width']} px, the table starting {t['label']!r}"
        if t["box_left"] < 0 or t["box_right"] > t["width"]:
            problems.append(f"{where} overflows the viewport ({t['box_left']} to {t['box_right']} px; a table wider "
                            "than the page scrolls in a box of its own: overflow-x: auto)")
        elif t["table_width"] > t["box_width"] and not t["scrolls"]:
            problems.append(f"{where} is cut off: {t['table_width']} px in a box of {t['box_width']} that does not "
                            "scroll")
        elif t["first_right"] > t["box_width"]:
            problems.append(f"{where} has a first column ({t['first_right']} px) wider than its box")
        elif t["table_width"] > t["box_width"] and t["width"] >= DESKTOP:
            problems.append(f"{where} is {t['table_width']} px in a column of {t['box_width']}: on a desktop a "
                            "table fits without scrolling (split it, transpose it, or drop columns)")
        elif t["table_width"] > t["box_width"] and t.get("page_table", True):  # not Sphinx's index
            problems.append(f"{where} scrolls sideways ({t['table_width']} px in {t['box_width']}): on a phone a "
                            "table stacks, each row's cells under its first")
        key = t.get("key")
        if key and not key["visible"]:
            problems.append(f"{where} shows its key column ({key['head']!r}) off screen")
        elif key and not key["second"] and t["width"] < DESKTOP:
            problems.append(f"{where} shows its key column ({key['head']!r}) after the others: it comes right "
                            "after the row's label")
    return problems


def layout_problems(page: str, width: int, found: Dict[str, List[str]]) -> List[str]:
    """What MEASURE_SCRIPT found at one width: identifiers broken across lines (inline code, signatures), error
    examples whose lines run off the side (the reason line, last, is the one a reader needs), and anchor targets
    that a jump leaves under the sticky header."""
    where = f"{page}: at {width} px,"
    problems = [f"{where} an identifier breaks across lines: {b!r}" for b in found.get("breaks", [])]
    problems += [f"{where} an error example runs off the side (wrap it): {e!r}" for e in found.get("errors", [])]
    problems += [f"{where} a jump to {h} hides it under the sticky header" for h in found.get("hidden", [])]
    problems += [f"{where} {o} runs past its column" for o in found.get("overflows", [])]
    problems += [f"{where} a table cell is {t} (more than {MAX_CELL_LINES}: keep the row short, the detail on a page "
                 "of its own)" for t in found.get("tall", [])]
    problems += [f"{where} a chart cannot be read: {c} (let it scroll at a readable size)"
                 for c in found.get("charts", [])]
    return problems


def render(binary: str, profile: str, url: str) -> Tuple[subprocess.CompletedProcess, DomReader, List[str]]:
    """One Chromium run: the page at each width of WIDTHS (in frames, MEASURE_SCRIPT in each). Returns the run,
    the page's DOM as rendered, and the problems of its layout (tables, broken identifiers, error examples,
    anchor jumps)."""
    run = chromium(binary, profile, ["--dump-dom", f"--window-size={sum(WIDTHS.values())},1600"], f"{url}?{MEASURE}")
    outer = DomReader()
    outer.feed(run.stdout)
    dom = DomReader()
    dom.feed(outer.page)
    page = url.split("/", 3)[-1]
    problems = [f"{page}: its layout was not measured at {w} px" for w in WIDTHS.values() if w not in outer.tables]
    for width, tables in outer.tables.items():
        problems += table_problems(page, tables) + layout_problems(page, width, outer.layout.get(width, {}))
    return run, dom, problems


def measure_layout(binary: str, profile: str, url: str) -> List[str]:
    """The problems of the page's layout as Chromium lays it out at each width of WIDTHS."""
    return render(binary, profile, url)[2]


def header_examples() -> Dict[str, bool]:
    """{reference page name: whether its headers' doc comments hold a \\code example} (docs/cpp_reference.py)."""
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    try:
        from cpp_reference import PAGES
    finally:
        sys.path.pop(0)
    found = {}
    for page, headers in PAGES.items():
        texts = []
        for header in headers:
            with open(os.path.join(HEADERS, header), encoding="utf-8") as f:
                texts.append(f.read())
        found[page] = any("\\code" in text for text in texts)
    return found


def serve(html_dir: str) -> Tuple[http.server.ThreadingHTTPServer, str]:
    """Serves html_dir on 127.0.0.1 at a free port, in a thread; returns the server and its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Recorder, directory=html_dir))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def find_chromium(explicit: Optional[str]) -> Optional[str]:
    for name in ([explicit] if explicit else ["chromium", "chromium-browser", "google-chrome"]):
        path = shutil.which(name) if name else None
        if path:
            return path
    return None


def chromium(binary: str, profile: str, args: List[str], url: str) -> subprocess.CompletedProcess:
    # --no-sandbox: CI runs as root, where Chromium refuses its sandbox. A profile of our own per run.
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
           "--no-first-run", "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}",
           "--virtual-time-budget=5000", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def site_pages(html_dir: str) -> List[str]:
    pages = []
    for folder, dirs, files in os.walk(html_dir):
        rel = os.path.relpath(folder, html_dir)
        dirs[:] = [d for d in dirs if not (rel == "." and d in SKIP_DIRS)]
        pages += [os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/") for f in files if f.endswith(".html")]
    return sorted(pages)


def is_image(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(512)
    return (head.startswith(b"\x89PNG") or head.startswith(b"\xff\xd8") or head.startswith(b"GIF8")
            or b"<svg" in head or b"<?xml" in head)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html_dir", nargs="?", default=os.path.join(ROOT, "docs", "_build", "html"))
    parser.add_argument("--screenshots", default=os.path.join(ROOT, "docs", "_build", "screenshots"))
    parser.add_argument("--chromium", default=None, help="the browser binary (default: chromium on PATH)")
    args = parser.parse_args(argv)
    html_dir = os.path.abspath(args.html_dir)
    if not os.path.isfile(os.path.join(html_dir, "index.html")):
        print(f"check_docs: no built site at {html_dir} (run sphinx-build first)", file=sys.stderr)
        return 1
    binary = find_chromium(args.chromium)
    if binary is None:
        print("check_docs: chromium is not installed (Debian: apt-get install chromium)", file=sys.stderr)
        return 2

    server, base = serve(html_dir)
    problems: List[str] = []
    doms: Dict[str, DomReader] = {}
    pages = site_pages(html_dir)
    missing_main = [p for p in MAIN_PAGES if p not in pages]
    problems += [f"{p}: main page missing from the build" for p in missing_main]
    os.makedirs(args.screenshots, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="check_docs_chromium_")
    examples_of = header_examples()
    try:
        for page in pages:
            url = base + page
            try:
                urllib.request.urlopen(url, timeout=30).read()
            except urllib.error.URLError as e:
                problems.append(f"{page}: does not load over HTTP ({e})")
                continue
            with Recorder.lock:
                Recorder.requests.clear()
            run, dom, layout = render(binary, profile, url)
            with Recorder.lock:
                failed = [(path, code) for path, code in Recorder.requests if code >= 400]
            doms[page] = dom
            problems += code_problems(page, dom, examples_of)
            problems += prose_problems(page, dom) + reference_problems(page, dom) + page_problems(page, dom) + layout
            # The search page has no heading; every other page has its title as one.
            if run.returncode != 0 or dom.main == 0 or (dom.headings == 0 and page != "search.html"):
                problems.append(f"{page}: did not render in Chromium (exit {run.returncode}, main {dom.main}, "
                                f"{dom.headings} headings; {run.stderr.strip()[-300:]})")
            for path, code in failed:
                if path == "/favicon.ico":  # asked for by the browser itself; a Sphinx site need not have one
                    continue
                problems.append(f"{page}: the browser's request for {path} got HTTP {code}")
            for suffix, width in WIDTHS.items() if page in MAIN_PAGES else ():
                shot = os.path.join(args.screenshots, page.replace("/", "_").replace(".html", suffix + ".png"))
                run = chromium(binary, profile, [f"--screenshot={shot}", f"--window-size={width},1600"], url)
                if run.returncode != 0 or not os.path.isfile(shot) or os.path.getsize(shot) == 0:
                    problems.append(f"{page}: no screenshot (exit {run.returncode}: {run.stderr.strip()[-300:]})")
    finally:
        shutil.rmtree(profile, ignore_errors=True)
        server.shutdown()

    problems += title_problems(doms)
    # Links and images of the rendered pages, resolved against the files of the site.
    ids_of: Dict[str, Set[str]] = {page: dom.ids for page, dom in doms.items()}
    links = images = 0
    for page, dom in doms.items():
        for ref in dom.images:
            target = urllib.parse.urlsplit(urllib.parse.urljoin(base + page, ref))
            if not (target.scheme + "://" + target.netloc + "/") == base:
                continue
            images += 1
            path = os.path.join(html_dir, urllib.parse.unquote(target.path.lstrip("/")))
            if not os.path.isfile(path) or os.path.getsize(path) == 0 or not is_image(path):
                problems.append(f"{page}: missing image {ref}")
        for ref in dom.links:
            if ref.startswith(("mailto:", "javascript:")):
                continue
            target = urllib.parse.urlsplit(urllib.parse.urljoin(base + page, ref))
            if target.scheme + "://" + target.netloc + "/" != base:
                continue  # external: not followed
            links += 1
            rel = urllib.parse.unquote(target.path.lstrip("/")) or "index.html"
            if rel.endswith("/"):
                rel += "index.html"
            if not os.path.exists(os.path.join(html_dir, rel)):
                problems.append(f"{page}: broken link {ref} (no {rel})")
                continue
            if target.fragment and rel.endswith(".html"):
                if rel not in ids_of:
                    reader = DomReader()
                    with open(os.path.join(html_dir, rel), encoding="utf-8") as f:
                        reader.feed(f.read())
                    ids_of[rel] = reader.ids
                if urllib.parse.unquote(target.fragment) not in ids_of[rel]:
                    problems.append(f"{page}: broken link {ref} (no id '{target.fragment}' in {rel})")

    for problem in problems:
        print(f"check_docs: {problem}", file=sys.stderr)
    shots = len([p for p in MAIN_PAGES if p in doms]) * len(WIDTHS)
    print(f"check_docs: {len(doms)} pages rendered in {os.path.basename(binary)}, {links} internal links and "
          f"{images} images checked, {shots} screenshots in {args.screenshots}: "
          f"{'FAILED, ' + str(len(problems)) + ' problems' if problems else 'ok'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
