"""scripts/check_docs.py's rules, on planted pages: the code rules read the rendered DOM (no browser); the table
rule reads what Chromium measured, planted, then measured by Chromium on a planted page where it is installed."""
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import check_docs  # noqa: E402


def problems(page, html):
    dom = check_docs.DomReader()
    dom.feed(html)
    return check_docs.code_problems(page, dom, check_docs.header_examples())


def test_a_code_line_wider_than_90_columns_fails():
    wide = "x" * 91
    found = problems("guides/new.html", f"<main><h1>t</h1><pre><span>{wide}</span>\nok</pre></main>")
    assert len(found) == 1 and "wider than 90 columns" in found[0]
    assert problems("guides/new.html", f"<pre>{'x' * 90}</pre>") == []


def test_no_page_is_exempt_from_the_width_rule():
    # the pages that include the examples and the generated outputs were the last exempt ones
    for page in ("guides/kernel-authors.html", "benchmarks.html", "reference/cli.html"):
        found = problems(page, f"<pre>{'x' * 95}\n{'y' * 95}</pre>")
        assert len(found) == 1 and "2 line(s) wider" in found[0]


def test_a_reference_page_without_code_fails_where_its_headers_have_examples():
    assert check_docs.header_examples()["tensor"]  # tensor.h's comments hold \code examples
    found = problems("reference/cpp/tensor.html", "<main><h1>Typed</h1><p>static PyObject* f() { }</p></main>")
    assert len(found) == 1 and "no code block" in found[0]
    assert problems("reference/cpp/tensor.html", "<main><h1>T</h1><pre>int x;</pre></main>") == []


def test_a_reference_code_block_highlighted_as_python_fails():
    # a \code without {.cpp} reaches Sphinx with no language: Pygments read C++ as Python (`//` an operator)
    plain = '<div class="highlight-default notranslate"><pre>int x;  // x</pre></div>'
    found = problems("reference/cpp/output.html", f"<main><h1>T</h1>{plain}</main>")
    assert len(found) == 1 and "highlighted as Python" in found[0]
    assert problems("reference/cpp/output.html", plain.replace("highlight-default", "highlight-cpp")) == []
    assert problems("guides/new.html", plain) == []  # elsewhere a block names its language, or is text


def rendered(page, html):
    dom = check_docs.DomReader()
    dom.feed(html)
    return check_docs.prose_problems(page, dom) + check_docs.reference_problems(page, dom)


def test_prose_with_a_stray_backtick_or_an_unclosed_quote_fails():
    # The bindings page as Breathe rendered pybind11.h's comments: Doxygen reads `...'...` as typographic quotes
    broken = ("<p>and why (<a href='#'>refusals.h</a>): \u2018overload 1: argument \u2018y\u2019: expected dtype "
              "float32, got float16`.</p>")
    found, = rendered("reference/cpp/bindings.html", broken)
    assert "a backtick and an opening quote \u2018 never closed" in found and "overload 1" in found
    annotated = ("<p>a typed one \u2018typing.Annotated[...], dict(dtype=\u2019float32\u2019, \u2026)]<code>, a returned "
                 "tensor</code>typing.Any<code>or</code>typing.Annotated[typing.Any, dict(...)]`.</p>")
    found, = rendered("reference/cpp/bindings.html", annotated)
    assert "a backtick" in found
    fixed = "<p>and why: <code>overload 1: argument 'y': expected `dtype` float32, got float16</code>.</p>"
    assert rendered("reference/cpp/bindings.html", fixed) == []
    # an apostrophe is a closing quote alone; code and code blocks are not prose
    assert rendered("p.html", "<li>the producer\u2019s words <code>\"output: \"</code></li><pre>`x' \"</pre>") == []


def test_a_quote_broken_over_two_paragraphs_fails():
    # A quoted string over two lines of a doc comment: Breathe ends the paragraph at the line break
    split = ("<dd><p>A leaf as torch refuses it (\u201ca leaf Variable that</p><p>requires grad is being used\u201d); "
             "any other</p></dd>")
    assert len(rendered("reference/cpp/tensor.html", split)) == 2
    # smart quotes turn "output: " into \u201coutput: \u201c (a space before the closing quote)
    found, = rendered("guides/x.html", "<p>starts with (\u201coutput: \u201c, \u201coutput \u2018out\u2019: \u201c)</p>")
    assert "4 \u201c against 0 \u201d" in found
    assert len(rendered("guides/x.html", '<td>say "hello</td>')) == 1


def test_a_group_heading_as_a_table_row_and_an_internal_signature_fail():
    grouped = ("<table><thead><tr><th>Name</th><th></th></tr></thead><tbody><tr><td><p><strong>Functions</strong></p>"
               "</td><td></td></tr><tr><td>guard</td><td>Runs a body</td></tr></tbody></table>")
    found, = rendered("reference/cpp/consumer.html", grouped)
    assert "heading among the data" in found and "Functions" in found
    assert rendered("reference/cpp/consumer.html", grouped.replace("<td></td>", "<td>-</td>")) == []
    internal = ('<dl><dt class="sig sig-object cpp" id="x"><span class="sig-name">Tensor</span>(detail::unchecked_t, '
                "PyObject *obj)</dt><dd><p>For the binding casters</p></dd></dl>")
    found, = rendered("reference/cpp/tensor.html", internal)
    assert "internal name" in found
    assert rendered("reference/cpp/tensor.html", internal.replace("detail::unchecked_t", "PyObject *obj")) == []


def test_break_points_keep_short_code_whole_and_break_long_tokens_only_between_names():
    sys.path.insert(0, os.path.join(REPO, "docs"))
    try:
        import break_points
    finally:
        sys.path.pop(0)
    # issue 61: `tests/test_gpu.|py`, `to_dlpack(|t)`, `ndim<|1>` broke at their dot or bracket: short code wraps whole
    short = '<code class="docutils literal notranslate"><span class="pre">tdb::explain_refusals(m)</span></code>'
    assert break_points.add_breaks(short) == short.replace("notranslate", "notranslate whole")
    # a long token breaks after ::, /, [ and , only: never at a dot, after ( or <
    long = ('<code class="docutils literal notranslate"><span class="pre">torch_dlpack_bridge/include/'
            'torch_dlpack_bridge/consumer.h</span> <span class="pre">typing.Annotated[DLPackTensorOf[typing.Literal[0]],'
            '</span></code>')
    out = break_points.add_breaks(long)
    assert "whole" not in out
    assert "torch_dlpack_bridge/<wbr>include/<wbr>torch_dlpack_bridge/<wbr>consumer.h" in out
    assert "typing.Annotated[<wbr>DLPackTensorOf[<wbr>typing.Literal[<wbr>0]]," in out
    assert ".<wbr>" not in out and "(<wbr>" not in out and "&lt;<wbr>" not in out
    # a signature's scope is a token of its own; a page rewritten twice gets one break
    sig = '<span class="n"><span class="pre">tdb</span></span><span class="p"><span class="pre">::</span></span><span>f'
    once = break_points.add_breaks(sig)
    assert once.endswith("</span></span><wbr><span>f") and break_points.add_breaks(once) == once
    assert break_points.add_breaks("<pre>torch.ones(2)</pre>") == "<pre>torch.ones(2)</pre>"  # code blocks: untouched
    # a range of numbers in the text stays whole (`4.38x (2.43-|12.13)` broke at 1280 px), in a code block too: untouched
    cell = "<td><p>4.38x (2.43-12.13)</p></td><pre>a 1-2</pre>"
    assert break_points.add_breaks(cell) == '<td><p>4.38x (<span class="range">2.43-12.13</span>)</p></td><pre>a 1-2</pre>'
    # a results table's key column (its head a ratio) is marked for the phone's order
    table = ("<table><thead><tr><th>tensor</th><th>ours ns</th><th>ours / minimal</th></tr></thead><tbody><tr>"
             "<td>0-d</td><td>18.9</td><td>1.13x</td></tr></tbody></table>")
    labelled = break_points.label_cells(table)
    assert '<td data-label="ours / minimal" data-key>1.13x' in labelled and labelled.count("data-key") == 1


def test_a_quoted_string_over_two_comment_lines_stays_in_one_paragraph():
    # Doxygen's XML of autograd.h's comment: the line break kept inside the quotes, where Breathe ends a paragraph
    sys.path.insert(0, os.path.join(REPO, "docs"))
    try:
        import cpp_reference
    finally:
        sys.path.pop(0)
    para = "<para>A leaf (&quot;a leaf Variable that\n   requires grad is used&quot;); any</para>"
    assert cpp_reference.join_quoted_lines(para) == \
        "<para>A leaf (&quot;a leaf Variable that requires grad is used&quot;); any</para>"
    code = '<codeline><highlight class="normal">f(&quot;x&quot;)</highlight></codeline>\n<codeline>'
    assert cpp_reference.join_quoted_lines(code) == code  # a code block's lines stay lines


# A page's tables as MEASURE_SCRIPT reports them (px): a 364 px box at 390, Furo's 742 px column at 1280.
def measured(width, box_left, box_right, table_width, box_width, scrolls, first_right=100):
    return dict(label="case", width=width, box_left=box_left, box_right=box_right, table_width=table_width,
                box_width=box_width, scrolls=scrolls, first_right=first_right)


def test_a_table_that_overflows_or_is_cut_off_fails():
    assert check_docs.table_problems("p.html", [measured(390, 16, 381, 340, 364, False),
                                                measured(1280, 392, 1135, 700, 742, False)]) == []
    overflow, = check_docs.table_problems("p.html", [measured(390, 16, 555, 539, 539, False)])
    assert "at 390 px" in overflow and "overflows the viewport" in overflow
    cut, = check_docs.table_problems("p.html", [measured(1280, 392, 1135, 900, 742, False)])
    assert "cut off" in cut
    wide_label, = check_docs.table_problems("p.html", [measured(390, 16, 381, 1121, 364, True, first_right=380)])
    assert "first column" in wide_label
    # issue 61: the benchmarks' tables scrolled sideways on a phone, their ratio column off screen: a phone stacks
    sideways, = check_docs.table_problems("benchmarks.html", [measured(390, 16, 381, 1121, 364, True)])
    assert "scrolls sideways" in sideways and "at 390 px" in sideways
    # the benchmarks page's per-tensor table at 1280 px: it scrolled in its box, which a desktop should not need
    scrolls, = check_docs.table_problems("benchmarks.html", [measured(1280, 392, 1135, 1121, 742, True)])
    assert "on a desktop a table fits without scrolling" in scrolls


WIDE = "<table><tr>" + "".join(f"<td>column{i}_with_a_long_unbreakable_value</td>" for i in range(8)) + "</tr></table>"


def test_the_browser_measures_a_planted_overflowing_table(tmp_path):
    # The rule above, fed by Chromium: a page with a wide bare table, one with it in a scrolling box.
    binary = check_docs.find_chromium(None)
    if binary is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); CI installs it for the docs")
    (tmp_path / "bare.html").write_text(f"<html><body><main><h1>t</h1>{WIDE}</main></body></html>")
    (tmp_path / "boxed.html").write_text(
        f'<html><body><main><h1>t</h1><div style="overflow-x: auto">{WIDE}</div></main></body></html>')
    server, base = check_docs.serve(str(tmp_path))
    profile = tmp_path / "profile"
    try:
        bare = check_docs.measure_layout(binary, str(profile), base + "bare.html")
        boxed = check_docs.measure_layout(binary, str(profile), base + "boxed.html")
    finally:
        server.shutdown()
    assert sorted(p.split(",")[0] for p in bare) == [
        "bare.html: at 1280 px", "bare.html: at 390 px"], bare
    assert all("overflows the viewport" in p for p in bare)
    desktop, = boxed  # scrolling in its box: not at 1280 px; on a phone a page's own table stacks (issue 61, below)
    assert "at 1280 px" in desktop and "on a desktop" in desktop


# A phone's page as the issue found it (a sticky header as Furo's, a name in inline code and a signature, an error
# example, a section to jump to), planted broken and then as the site's CSS fixes it.
PHONE_PAGE = """<html><head><style>
  body {{ margin: 0; font: 16px monospace; }} header {{ position: sticky; top: 0; height: 56px; background: #eee; }}
  article {{ overflow-wrap: {wrap}; padding: 0 16px; }} pre {{ overflow-x: auto; white-space: {pre}; }}
  section, dt {{ scroll-margin-top: {margin}px; }}
</style></head><body><header>docs</header><main><article><h1>t</h1>
<p>Register it with <code>tdb::register_nanobind_error_translator()</code> early.</p>
<dl><dt class="sig" id="f">void tdb::register_nanobind_error_translator()</dt><dd>x</dd></dl>
<pre>TypeError: scale_(): incompatible function arguments. The following argument types are supported:
Why the tensor arguments were refused:
    overload 1: argument 'x': expected dtype float32, got int32</pre>
{filler}<section id="later"><h2>Later</h2><p>text</p></section>{filler}
</article></main></body></html>"""


def test_the_browser_finds_broken_names_hidden_errors_and_anchors_at_390_px(tmp_path):
    binary = check_docs.find_chromium(None)
    if binary is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); CI installs it for the docs")
    filler = "<p>filler</p>" * 60
    (tmp_path / "broken.html").write_text(PHONE_PAGE.format(wrap="anywhere", pre="pre", margin=0, filler=filler))
    (tmp_path / "fixed.html").write_text(PHONE_PAGE.format(wrap="normal", pre="pre-wrap", margin=64, filler=filler)
                                         .replace("tdb::register", "tdb::<wbr>register"))
    server, base = check_docs.serve(str(tmp_path))
    try:
        broken = check_docs.measure_layout(binary, str(tmp_path / "profile"), base + "broken.html")
        fixed = check_docs.measure_layout(binary, str(tmp_path / "profile"), base + "fixed.html")
    finally:
        server.shutdown()
    phone = [p for p in broken if "at 390 px" in p]
    assert any("identifier breaks across lines" in p and "translat|or" in p for p in phone), broken
    assert any("error example runs off the side" in p for p in phone), broken
    assert any("#later" in p and "under the sticky header" in p for p in phone), broken
    assert fixed == []


PLANTED_HEADER = """\
/*! \\file planted.h \\brief A planted header. */
namespace tdb {
/*! \\brief A view. */
class View {
 public:
  /*! \\brief The number of dimensions. */
  int ndim() const { return 0; }
  int size(int dim) const { return dim; }
};
}  // namespace tdb
"""


def test_an_undocumented_public_member_stops_the_reference(tmp_path):
    # docs/Doxyfile, which conf.py runs with check=True, on a header with one member left without a comment.
    if shutil.which("doxygen") is None:
        pytest.skip("doxygen is not installed (Debian: apt-get install doxygen); CI installs it for the docs")
    with open(os.path.join(REPO, "docs", "Doxyfile")) as f:
        config = f.read() + f"\nINPUT = {tmp_path}\nOUTPUT_DIRECTORY = {tmp_path / 'out'}\n"

    def doxygen(header):
        (tmp_path / "planted.h").write_text(header)
        return subprocess.run(["doxygen", "-"], input=config, cwd=os.path.join(REPO, "docs"), capture_output=True,
                              text=True, timeout=120)

    undocumented = doxygen(PLANTED_HEADER)
    assert undocumented.returncode != 0
    assert "size(int dim) const (function) of class tdb::View is not documented" in undocumented.stderr
    documented = doxygen(PLANTED_HEADER.replace("  int size", "  /*! \\brief The size of `dim`. */\n  int size"))
    assert documented.returncode == 0, documented.stderr


def test_emphasis_made_of_a_dunder_name_fails():
    # autograd.h's comment as it was: `__torch_function__` outside code, which Doxygen rendered as bold
    # "torch_function"; a Markdown page's __dlpack__ the same (italics here)
    header = "/*!\n * \\brief a subclass with its own __torch_function__, or `__init__` in code\n */\nint __x__;"
    page = "Taken through __dlpack__ (`__dlpack_device__` first).\n```python\nt.__array__()\n```\n"
    dunders = check_docs.unquoted_dunders(header) | check_docs.unquoted_dunders(page)
    assert dunders == {"torch_function", "dlpack"}
    bold = "<p>a subclass with its own <strong>torch_function</strong>; the protocol (<em>dlpack</em>)</p>"
    found = check_docs.reference_problems("reference/cpp/tensor.html", read_dom(bold), dunders)
    assert len(found) == 2 and all("emphasis made of a dunder's name" in p for p in found), found
    assert "'torch_function'" in found[0] and "'dlpack'" in found[1]
    # deliberate emphasis, a word that is also a dunder's name written in code, and a signature's parameter
    fine = ("<p>the <strong>loader</strong> picks it; <strong>Overloads.</strong></p><dl><dt class='sig'>f("
            "<em class='sig-param'>dlpack</em>)</dt></dl>")
    assert check_docs.reference_problems("reference/cpp/tensor.html", read_dom(fine), dunders) == []
    # the sources as they are now: every dunder written as code
    assert not check_docs.source_dunders() & {"torch_function", "dlpack", "cause"}


def read_dom(html):
    dom = check_docs.DomReader()
    dom.feed(html)
    return dom


def test_an_internal_name_in_the_public_reference_fails():
    assert {"autograd_refuses_write", "commit_write", "AutogradProbe"} <= check_docs.internal_names()
    # public names are not internal, nor internal ones that read as words
    assert not {"explain_refusals", "Tensor", "check_dtype", "explain", "bound"} & check_docs.internal_names()
    leaked = "<article><p>the decision (autograd_refuses_write) while the library tries overloads</p></article>"
    found, = rendered("reference/cpp/tensor.html", leaked)
    assert "internal of the headers" in found and "autograd_refuses_write" in found
    assert rendered("guides/kernel-authors.html", leaked) == []  # elsewhere the internals may be explained
    public = "<article><p>the decision while the library tries overloads (<code>tdb::explain_refusals</code>)</p></article>"
    assert rendered("reference/cpp/tensor.html", public) == []


def test_a_cell_or_a_code_block_running_past_its_column_fails():
    found = check_docs.layout_problems("guides/kernel-authors.html", 390, {"overflows": [
        "a table cell (160 px of content in 84): torch.ones(2, 4, device=\"meta\")"]})
    assert found == ["guides/kernel-authors.html: at 390 px, a table cell (160 px of content in 84): "
                     "torch.ones(2, 4, device=\"meta\") runs past its column"]


# A phone's page with the rest of the issue's defects (issue 52), in Sphinx's markup: a reasons table whose code runs
# out of its cell, inline code broken at a hyphen, a session block that wraps inside a name and inside `->`, a code
# block running past its box without scrolling; then as the site fixes them (docs/break_points.py, custom.css).
CELLS_PAGE = """<html><head><style>
  body {{ margin: 0; font: 16px monospace; }} article {{ padding: 0 16px; }} .nobr {{ white-space: nowrap; }}
  table {{ table-layout: fixed; width: 100%; }} td {{ overflow-wrap: {cell_wrap}; }}
  .highlight-pycon pre {{ white-space: pre-wrap; overflow-wrap: anywhere; }} pre.plain {{ overflow-x: {plain}; }}
  {extra}
</style></head><body><main><article><h1>t</h1>
<table><tr><td>meta (W)</td><td><code class="docutils literal notranslate"><span class="pre">{meta}</span></code></td>
<td>line</td></tr></table>
<p>Build it with <code class="docutils literal notranslate"><span class="pre">pip</span> <span class="pre">install</span>
<span class="pre">--no-build-isolation</span></code> from the checkout you have, then with
<code class="docutils literal notranslate"><span class="pre">python3-dev</span></code> installed.</p>
<div class="highlight-pycon notranslate"><div class="highlight"><pre><span class="gp">&gt;&gt;&gt; </span>k(x)
<span class="go">    1. (x: typing.Annotated[my.torch_dlpack_bridge.typing.DLPackTensorOf[typing.Literal['float32']], dict(dtype='float32')], a: float) -&gt; float</span>
</pre></div></div>
<pre class="plain">{wide}</pre>
</article></main></body></html>"""


def chromium_and_break_points():
    """(the Chromium binary, docs/break_points.py as a module); skips where Chromium is not installed."""
    binary = check_docs.find_chromium(None)
    if binary is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium); CI installs it for the docs")
    sys.path.insert(0, os.path.join(REPO, "docs"))
    try:
        import break_points
    finally:
        sys.path.pop(0)
    return binary, break_points


def test_the_browser_finds_cells_hyphens_and_blocks_running_past_their_column_at_390_px(tmp_path):
    binary, break_points = chromium_and_break_points()
    wide = "x = torch.ones(3)  # " + "y" * 120
    broken = CELLS_PAGE.format(cell_wrap="normal", meta='torch.ones(2,&nbsp;4,&nbsp;device="meta")', plain="visible",
                               wide=wide, extra="")
    # fixed as the site is since issue 61: short inline code wraps whole, and a phone stacks the table's cells
    fixed = CELLS_PAGE.format(cell_wrap="anywhere", meta='torch.ones(2, 4, device="meta")', plain="auto", wide=wide,
                              extra="code.whole { white-space: nowrap; } table, tbody, tr, td { display: block; }")
    (tmp_path / "broken.html").write_text(broken)
    (tmp_path / "fixed.html").write_text(break_points.add_breaks(fixed))
    server, base = check_docs.serve(str(tmp_path))
    try:
        found = check_docs.measure_layout(binary, str(tmp_path / "profile"), base + "broken.html")
        clean = check_docs.measure_layout(binary, str(tmp_path / "profile"), base + "fixed.html")
    finally:
        server.shutdown()
    phone = [p for p in found if "at 390 px" in p]
    assert any("a table cell" in p and "device=" in p and "runs past its column" in p for p in phone), found
    assert any("a code block" in p and "runs past its column" in p for p in phone), found
    breaks = [p for p in phone if "identifier breaks across lines" in p]
    # after a hyphen (-|> in the session), or, in short inline code, split at all (`--no-|build-isolation`,
    # `python3-|dev`: issue 61's rule that short code wraps whole reports them)
    assert any("-|" in p for p in breaks) or any("build-isolation (inline code" in p for p in breaks), found
    assert any(re.search(r"[A-Za-z_]\|[A-Za-z_]", p) for p in breaks), found  # inside a name of the session
    assert clean == [], clean


# Issue 61's defects as a reader met them at 1280 and 390 px, planted in Sphinx's markup: inline code broken at a dot,
# after `(` or `<` (the old break points), short code split, a range broken at its hyphen, a results table whose ratio
# column scrolls off a phone, a cell as tall as a page, a chart shrunk to a third; then the same page as the site
# renders it now (docs/break_points.py, docs/_static/custom.css).
ISSUE61_PAGE = """<html><head><style>
  body {{ margin: 0; font: 16px/1.5 monospace; }} article {{ padding: 0 16px; }} .narrow {{ width: 9ch; }}
  span.pre {{ white-space: nowrap; }} .table-wrapper {{ overflow-x: auto; }} {css}
</style></head><body><main><article><h1>t</h1>
<p class="narrow"><code class="docutils literal notranslate"><span class="pre">{dotted}</span></code></p>
<p class="narrow"><code class="docutils literal notranslate"><span class="pre">{typed}</span> <span class="pre">x</span></code></p>
<p class="narrow">see <code class="docutils literal notranslate"><span class="pre">torch.ones(2,</span> <span class="pre">4)</span></code></p>
<p class="narrow">4.38x (2.43-12.13)</p>
<div class="table-wrapper"><table class="docutils"><thead><tr><th>tensor</th><th>notes</th><th>ours / minimal</th></tr>
</thead><tbody><tr><td>0-d</td><td>{wide}</td><td>1.13x</td></tr></tbody></table></div>
<div class="table-wrapper"><table class="docutils"><thead><tr><th>what</th><th>test</th></tr></thead>
<tbody><tr><td>{tall}</td><td>tests/test_export.py</td></tr></tbody></table></div>
<figure><a class="image-reference" href="chart.png"><img src="chart.png" style="width: 100%"></a></figure>
</article></main></body></html>"""


def png(width, height):
    """A plain white PNG of that size (a chart's stand-in)."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\xff" * (3 * width) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def issue61_pages(tmp_path_factory):
    """check_docs' layout findings on the planted page, broken and as the site fixes it: {name: [problems]}."""
    binary, break_points = chromium_and_break_points()
    tmp = tmp_path_factory.mktemp("issue61")
    (tmp / "chart.png").write_bytes(png(1100, 40))
    with open(os.path.join(REPO, "docs", "_static", "custom.css")) as f:
        site_css = f.read()
    wide = " ".join(["a_long_note_that_widens_the_table"] * 12)
    tall = "<br>".join(["a line of a guarantee's detail"] * 20)
    broken = ISSUE61_PAGE.format(
        css="", wide=wide, tall=tall,
        dotted="torch_dlpack_bridge.check.pytest_entry.<wbr>conformance_tests(<wbr>TARGET)",
        typed="tdb::Tensor&lt;<wbr>float,&nbsp;tdb::ndim&lt;<wbr>1&gt;,&nbsp;tdb::c_contig&gt;")
    fixed = ISSUE61_PAGE.format(
        css=site_css, wide=wide, tall="a guarantee in one line",
        dotted="torch_dlpack_bridge.check.pytest_entry.conformance_tests(TARGET)",
        typed="tdb::Tensor&lt;float,&nbsp;tdb::ndim&lt;1&gt;,&nbsp;tdb::c_contig&gt;")
    (tmp / "broken.html").write_text(broken)
    (tmp / "fixed.html").write_text(break_points.label_cells(break_points.add_breaks(fixed)))
    server, base = check_docs.serve(str(tmp))
    try:
        return {name: check_docs.measure_layout(binary, str(tmp / "profile"), base + name + ".html")
                for name in ("broken", "fixed")}
    finally:
        server.shutdown()


def at_both_widths(problems, *words):
    """The problems with all of `words`, one list per width: each rule is measured at 1280 and at 390 px."""
    found = [p for p in problems if all(w in p for w in words)]
    return [[p for p in found if f"at {w} px" in p] for w in (1280, 390)]


def test_inline_code_broken_at_a_dot_or_after_a_bracket_fails_at_both_widths(issue61_pages):
    for width in at_both_widths(issue61_pages["broken"], "identifier breaks"):
        assert any("pytest_entry.|conformance" in p for p in width), issue61_pages["broken"]
        assert any("conformance_tests(|TARGET" in p for p in width), issue61_pages["broken"]
        assert any("Tensor<|float" in p for p in width), issue61_pages["broken"]
    assert not [p for p in issue61_pages["fixed"] if "identifier breaks" in p], issue61_pages["fixed"]


def test_short_inline_code_split_across_lines_fails(issue61_pages):
    for width in at_both_widths(issue61_pages["broken"], "torch.ones(2, 4) (inline code of 16 characters"):
        assert len(width) == 1, issue61_pages["broken"]


def test_a_range_broken_at_its_hyphen_fails(issue61_pages):
    for width in at_both_widths(issue61_pages["broken"], "(2.43-|12.13)", "a range broken at its hyphen"):
        assert len(width) == 1, issue61_pages["broken"]


def test_a_results_table_whose_ratio_is_off_a_phone_fails(issue61_pages):
    desktop, phone = at_both_widths(issue61_pages["broken"], "the table starting 'tensor'")
    assert any("scrolls sideways" in p for p in phone) and any("key column ('ours / minimal') off screen" in p
                                                                for p in phone), phone
    assert desktop == [], desktop  # at 1280 px it fits: its notes wrap
    assert not [p for p in issue61_pages["fixed"] if "'tensor'" in p]  # stacked, the ratio right after the label


def test_a_table_cell_taller_than_a_screen_fails(issue61_pages):
    for width in at_both_widths(issue61_pages["broken"], "a table cell is", "lines: a line of a guarantee"):
        assert len(width) == 1, issue61_pages["broken"]


def test_a_chart_shrunk_below_half_its_size_fails_on_a_phone(issue61_pages):
    desktop, phone = at_both_widths(issue61_pages["broken"], "a chart cannot be read: chart.png")
    assert desktop == [] and len(phone) == 1 and "of 1100 px)" in phone[0], issue61_pages["broken"]
    assert not [p for p in issue61_pages["fixed"] if "chart" in p], issue61_pages["fixed"]


def test_the_fixed_page_has_none_of_these_problems(issue61_pages):
    assert issue61_pages["fixed"] == []


def test_implementation_words_in_the_reference_limitations_or_guarantees_fail():
    # pybind11.h, nanobind.h and the guarantees as they read at 2ff9bc6 (issue 61)
    words = ("<article><p>all arguments that do not match: load() returns false in both passes; from_python() returns "
             "false with and without cast_flags::convert. Needs pybind11 3 (its vectorcall dispatcher). It makes its "
             "record innermost and puts it back; exports lent between overloads are its own record\u2019s.</p></article>")
    found = check_docs.page_problems("reference/cpp/bindings.html", read_dom(words))
    said = " ".join(found)
    for word in ("'load()'", "'from_python()'", "'cast_flags'", "'vectorcall'", "'dispatcher'", "'innermost'",
                 "'puts it back'", "'lent'", "'its record'"):
        assert word in said, (word, found)
    assert len(check_docs.page_problems("limitations.html", read_dom(words))) == len(found)
    assert len(check_docs.page_problems("guarantees-detail.html", read_dom(words))) == len(found)
    assert check_docs.page_problems("how-it-works.html", read_dom(words)) == []  # the place to explain the inside
    plain = "<article><p>the parameter declines them whether or not pybind11 allows conversions</p></article>"
    assert check_docs.page_problems("reference/cpp/bindings.html", read_dom(plain)) == []


def test_text_a_generator_left_for_itself_fails():
    # benchmarks.html at 2ff9bc6: a worker's raw exception (twice), a table of zero slices, the goals' own notes
    page = ("<article><p>torch_dlpack_bridge: RuntimeError: this torch (&lt; 2.11) offers no raw stream handle</p>"
            "<p>from C (the probe, GIL held, rotating slices, 0 slices of 20,000 calls):</p>"
            "<ul><li><p>Not a goal, for the reader: with / without per tensor 1.15x</p></li></ul></article>")
    found = check_docs.page_problems("benchmarks.html", read_dom(page))
    assert [p.split(": ")[1] for p in found] == [
        "a raw exception message in the text", "a measurement of zero samples", "a note of the scripts' goals"], found
    fine = ("<article><p>torch_dlpack_bridge is not in this table: this torch (&lt; 2.11) offers no raw stream handle."
            "</p><p>rotating slices, 21 slices of 20,000 calls; raises <code>ValueError: n</code></p></article>")
    assert check_docs.page_problems("benchmarks.html", read_dom(fine)) == []


def test_a_topic_under_another_topics_heading_fails():
    # kernel-authors.html at 2ff9bc6: "Accessors." as a bold lead-in of a paragraph under the heading "Names"
    page = ('<article><section id="t"><h1>Guide</h1><section id="names"><h3>Names<a class="headerlink">\u00b6</a>'
            "</h3><p>Neither binding library tells a caster the name.</p><p><strong>Accessors.</strong> "
            "<code>t.view()</code> gives a view.</p></section></section></article>")
    found, = check_docs.page_problems("guides/kernel-authors.html", read_dom(page))
    assert "'Accessors.' in the section 'Names'" in found
    # its own heading; a section of several run-in headings (a list of topics); a lead-in that names the heading
    own = page.replace("<p><strong>Accessors.</strong>", '</section><section id="a"><h3>Accessors</h3><p>')
    several = page.replace("<p>Neither", "<p><strong>Overloads.</strong> Neither")
    named = page.replace("Accessors.", "Names in the body.")
    for fine in (own, several, named):
        assert check_docs.page_problems("guides/kernel-authors.html", read_dom(fine)) == []


def test_a_title_the_links_to_its_page_do_not_say_fails():
    page = lambda title, links: read_dom(f"<article><h1>{title}<a>\u00b6</a></h1>{links}</article>")  # noqa: E731
    links = '<p><a href="limitations.html">limitations</a></p>'
    doms = {"limitations.html": page("Choices and what is not supported yet", ""),
            "index.html": page("Home", links), "support.html": page("Support", links.replace("limitations<", "Limitations<")),
            "guides/x.html": page("X", '<a href="../limitations.html#gpu">a GPU</a>')}  # a section's link: its own words
    found, = check_docs.title_problems(doms)
    assert found.startswith("limitations.html: its title is 'Choices and what is not supported yet'")
    doms["limitations.html"] = page("Limitations: choices and what is not supported yet", "")
    assert check_docs.title_problems(doms) == []
