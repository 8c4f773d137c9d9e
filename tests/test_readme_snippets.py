"""The snippets of README.md and of the documentation (docs/) are the code itself, so they stay real as the code
changes:

- README's snippets marked `<!-- quoted from PATH -->` are verbatim excerpts of PATH (the examples, or the
  snippet files under docs/snippets/ that the docs include), and the Python ones run and print what they say;
- every `literalinclude` and `include` of the docs names a file that exists, and its start/end markers are
  still in that file (sphinx-build -W fails on them too; this checks without Sphinx installed);
- README keeps its two commands (set up + main job; the tests), which `.ci/run` runs, and the docs command.
"""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs")
QUOTE = re.compile(r"<!-- quoted from (\S+) -->\n```\w*\n(.*?)\n```", re.S)
# ```{literalinclude} PATH / ```{include} PATH, then ":option: value" lines.
DIRECTIVE = re.compile(r"^```\{(literalinclude|include)\}\s+(\S+)\n((?::[\w-]+:.*\n)*)", re.M)
MARKERS = ("start-at", "start-after", "end-before", "end-at")
SNIPPETS = ("docs/snippets/check.py", "docs/snippets/tvm_ffi_call.py")


def read(path):
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def quotes():
    return QUOTE.findall(read("README.md"))


def doc_pages():
    for folder, dirs, files in os.walk(DOCS):
        dirs[:] = [d for d in dirs if d != "_build"]
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def directives():
    """(page, kind, target path relative to the repo, {option: value}) of every include in the docs."""
    found = []
    for page in doc_pages():
        with open(page) as f:
            text = f.read()
        for kind, target, options in DIRECTIVE.findall(text):
            opts = {}
            for line in options.splitlines():
                key, _, value = line[1:].partition(":")
                value = value.strip()
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                    value = value[1:-1]
                opts[key] = value
            path = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(page), target)), REPO)
            found.append((os.path.relpath(page, REPO), kind, path, opts))
    return found


def test_readme_quotes_the_three_snippets():
    paths = {path for path, _ in quotes()}
    assert set(SNIPPETS) | {"examples/axpy_pybind11/axpy_pybind11.cpp"} <= paths


@pytest.mark.parametrize("path,snippet", quotes(), ids=[p for p, _ in quotes()])
def test_quoted_snippet_is_verbatim(path, snippet):
    assert snippet in read(path), f"README snippet is not (or no longer) a verbatim excerpt of {path}"


def test_python_snippets_are_quoted_whole():
    for path, snippet in quotes():
        if path in SNIPPETS:
            assert snippet == read(path).rstrip("\n"), f"README quotes only part of {path}"


def run_snippet(path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_DLPACK_BRIDGE_PREFER", "TORCH_DLPACK_BRIDGE_AUTOLOAD")}
    return subprocess.run([sys.executable, os.path.join(REPO, path)], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(os.path.join(REPO, path)), timeout=300)


def test_check_snippet_prints_what_it_says():
    source = read("docs/snippets/check.py")
    promised = "\n".join(re.findall(r"^# (__\w+__ \w+)$", source, re.M))
    assert promised
    run = run_snippet("docs/snippets/check.py")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == promised


@pytest.mark.skipif(importlib.util.find_spec("tvm_ffi") is None, reason="apache-tvm-ffi is not installed")
def test_tvm_ffi_snippet_runs():
    run = run_snippet("docs/snippets/tvm_ffi_call.py")
    assert run.returncode == 0, run.stderr


def test_docs_include_each_flavour_from_the_examples():
    included = {path for _, kind, path, _ in directives() if kind == "literalinclude"}
    assert set(SNIPPETS) | {
        "examples/axpy_kernels/axpy_kernels.cpp", "examples/axpy_pybind11/axpy_pybind11.cpp",
        "examples/axpy_pybind11/setup.py", "examples/axpy_compile/axpy_compile/ops.py",
        "examples/axpy_nanobind/axpy_nanobind.cpp", "examples/axpy_nanobind/pyproject.toml",
        "examples/rms_norm/rms_norm.cpp", "examples/rms_norm/CMakeLists.txt", "examples/axpy_pybind11/pyproject.toml",
    } <= included
    # The kernel author's guide shows the whole pybind11 example, not an excerpt.
    assert any(page == "docs/guides/kernel-authors.md" and path == "examples/axpy_pybind11/axpy_pybind11.cpp"
               and not set(opts) & {*MARKERS, "lines", "pyobject"} for page, _, path, opts in directives())


def test_docs_include_the_results_and_the_matrix_not_copies():
    included = {path for _, _, path, _ in directives()}
    assert "benchmarks/STARTUP.md" in included
    # The Benchmarks page's results: benchmarks/RESULTS.md as docs/results_page.py shows it, written at every build.
    assert "docs/_build/generated/RESULTS.md" in included and "benchmarks/RESULTS.md" not in included
    assert 'os.path.join(ROOT, "benchmarks", "RESULTS.md")' in read("docs/conf.py")
    # The support page's wheel matrix: regrouped from scripts/wheel_matrix.md at every build (docs/conf.py,
    # docs/wheel_matrix_page.py), never a copy in git.
    assert "docs/_build/generated/wheel_matrix.md" in included
    assert 'os.path.join(ROOT, "scripts", "wheel_matrix.md")' in read("docs/conf.py")


@pytest.mark.parametrize("page,kind,path,opts", [d for d in directives() if not d[2].startswith("docs/_build")],
                         ids=[f"{d[0]}:{d[2]}" for d in directives() if not d[2].startswith("docs/_build")])
def test_docs_include_exists_and_its_markers_match(page, kind, path, opts):
    assert os.path.isfile(os.path.join(REPO, path)), f"{page} includes {path}, which does not exist"
    text = read(path)
    position = 0
    for marker in MARKERS:
        if marker in opts:
            found = text.find(opts[marker], position)
            assert found >= 0, f"{page}: :{marker}: {opts[marker]!r} is not in {path} (after the start)"
            position = found


def test_readme_headline_numbers_are_in_the_results():
    """Every "N ns" and "N.NNx" of README's headline is a cell (or a bold figure) of benchmarks/RESULTS.md, so the
    front page claims nothing the benchmarks do not produce; rerunning them means updating the headline."""
    readme = read("README.md")
    headline = readme[readme.index("Measured on"):readme.index("## Install")]
    numbers = [n for a, b in re.findall(r"(\d[\d,]*(?:\.\d+)?)(?:-(\d[\d,]*(?:\.\d+)?))? ns", headline) for n in (a, b) if n]
    numbers += re.findall(r"\d+\.\d+x", headline)
    # one number per audience, each in bold with its comparison: the kernel libraries' user, the kernel author
    assert len(re.findall(r"^- ", headline, re.M)) == 2 and "-" not in "".join(numbers), headline
    assert len(numbers) >= 3, numbers
    results = read("benchmarks/RESULTS.md")
    missing = [n for n in numbers if not re.search(rf"(\| |\*\*){re.escape(n)}( \||\*\*)", results)]
    assert not missing, f"README headline numbers not in benchmarks/RESULTS.md: {missing}"


def test_readme_keeps_its_commands_and_ci_runs_them():
    readme = read("README.md")
    # The tools come from pyproject.toml's dependency groups, declared once: README's set-up, .ci/run and the docs
    # build install them by name, and no other list of them exists.
    # the developer's set-up, line by line as .ci/run runs it; editable_mode=compat: mypy sees the package
    # (tests/test_stubs.py type-checks as a user after this set-up)
    setup = ("\npython3 -m venv .venv && . .venv/bin/activate\npip install -U pip\n"
             "pip install torch==2.13.0 --group test\n"
             "pip install --no-build-isolation -e . --config-settings editable_mode=compat\n"
             "python -m torch_dlpack_bridge\n")
    assert setup in readme
    assert "\npython -m pytest tests -q\n" in readme
    assert "pip install --group docs && sphinx-build -W --keep-going docs docs/_build/html" in readme
    ci = read(".ci/run")
    assert "\npython -m pip install --quiet torch==2.13.0 --group test\n" in ci
    assert "\npython -m pip install --quiet --no-build-isolation -e . --config-settings editable_mode=compat\n" in ci
    assert "\npython -m pytest tests -q\n" in ci
    # the docs as README says, through the script that the release workflow also runs
    docs = read("scripts/build_docs.sh")
    assert "\nscripts/build_docs.sh docs/_build/html\n" in ci
    assert "sphinx-build -W --keep-going" in docs and "scripts/check_docs.py" in docs
    assert '--group "$repo/pyproject.toml:docs"' in docs
    assert not os.path.exists(os.path.join(REPO, "docs", "requirements.txt"))


def test_the_groups_hold_what_the_tests_and_the_docs_import():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        groups = tomllib.load(f)["dependency-groups"]
    test = {g for g in groups["test"] if isinstance(g, str)}
    assert {"pytest", "numpy", "hypothesis", "pybind11", "nanobind", "mypy", "pybind11-stubgen"} <= test
    assert {"include-group": "build"} in groups["test"] and "setuptools>=77" in groups["build"]
    assert all("==" in pin for pin in groups["docs"])  # the site is built with the versions it was checked with
    conf = read("docs/conf.py")
    for extension in ("breathe", "myst_parser"):
        assert extension in conf and any(pin.startswith(extension.replace("_", "-")) for pin in groups["docs"])


def test_readme_is_a_front_page():
    """What a newcomer reads first: the two commands, links to the first kernel and the stable-ABI guide; the suite's
    times and the machines they were measured on are in docs/development.md, not here."""
    readme = read("README.md")
    assert "(docs/guides/first-kernel.md)" in readme and "(docs/guides/stable-abi.md)" in readme
    assert not re.search(r"load average|\d+(\.\d+)? minutes|skipped", readme)
    assert readme.count("```bash") == 4  # install, install from a checkout, set-up + tests, docs
    development = read("docs/development.md")
    assert "load average" in development and "skipped" in development


def test_getting_started_ends_at_the_first_kernel():
    page = read("docs/getting-started.md").rstrip()
    last = page[page.rindex("\n\n"):]
    assert "(guides/first-kernel.md)" in last and "kernel-authors" not in last, last


def test_the_benchmarks_page_leaves_the_goals_and_the_commit_in_the_source_tree():
    sys.path.insert(0, DOCS)
    try:
        import results_page
    finally:
        sys.path.pop(0)
    results = read("benchmarks/RESULTS.md")
    page = results_page.page_version(results)
    assert "- Goal met: " in results and "**Goal not met**" in results and "### Goals" in results
    assert re.search(r"commit [0-9a-f]{7}", results)
    assert "Goal" not in page and not re.search(r"commit [0-9a-f]{7}", page)
    assert "Not a goal" not in page and "for the reader" not in page.lower()  # the ratios no goal judges (issue 61)
    # a provider that failed is said once, in words: no raw exception, no table of zero slices (issue 61)
    assert "RuntimeError: " not in page and not re.search(r"\b0 slices\b", page)
    # every measurement stays: the tables, the sections' markers, the runs' details
    assert [line for line in results.splitlines() if line.startswith(("|", "<!--", "Measured with"))] == \
        [line for line in page.splitlines() if line.startswith(("|", "<!--", "Measured with"))]
    assert re.search(r"^- run: `python benchmarks/run.py` .*; measured in \d+ s; table library built ", page, re.M)


def test_readme_sets_up_from_a_checkout_right_under_the_install_by_name():
    """Under `pip install torch_dlpack_bridge`, the set-up from a checkout: multi-line, with torch, a non-editable
    install (setuptools prints no deprecation box for it, and mypy finds the package where it is installed), the
    main job run outside the checkout (whose torch_dlpack_bridge/ folder would be imported instead)."""
    readme = read("README.md")
    install = readme[readme.index("## Install"):readme.index("## Three snippets")]
    blocks = re.findall(r"```bash\n(.*?)```", install, re.S)
    assert len(blocks) == 2 and blocks[0].startswith("pip install torch_dlpack_bridge ")
    lines = [line.split("  #")[0].strip() for line in blocks[1].splitlines()]
    assert lines[0] == "python3 -m venv .venv && . .venv/bin/activate" and len(lines) >= 5
    assert any(re.match(r"pip install torch==\d+\.\d+\.\d+\b", line) for line in lines)
    assert "pip install --no-build-isolation ." in lines and "editable_mode" not in blocks[1]
    assert lines[-1] == "cd .. && python -m torch_dlpack_bridge"


def test_readme_says_what_the_tvm_ffi_snippet_needs():
    readme = read("README.md")
    quoted = readme.index("<!-- quoted from docs/snippets/tvm_ffi_call.py -->")
    assert "`pip install apache-tvm-ffi`" in readme[readme.rindex("\n\n", 0, quoted - 2):quoted]
