"""scripts/check_docs.py's code rules, on planted pages (no browser: the rules read the rendered DOM)."""
import os
import sys

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
