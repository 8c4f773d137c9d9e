"""Sphinx configuration of the torch_dlpack_bridge documentation.

Build (from the repository root, in the environment where torch_dlpack_bridge is installed, with Doxygen and
Graphviz on PATH):  sphinx-build -W --keep-going docs docs/_build/html
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

project = "torch_dlpack_bridge"
author = "torch_dlpack_bridge developers"
copyright = "2026, " + author

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.graphviz",
    "breathe",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "snippets", "first_kernel"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "torch_dlpack_bridge"
html_static_path = ["_static"]
html_css_files = ["custom.css"]

graphviz_output_format = "svg"

# The package is documented as installed (autodoc imports it, which publishes the table: harmless here).
autodoc_member_order = "bysource"
autodoc_typehints = "description"

# C++ API: Doxygen reads the headers' own doc comments, Breathe renders them. Run Doxygen on every build so
# the reference cannot lag behind the headers.
DOXYGEN_XML = os.path.join(HERE, "_build", "doxygen", "xml")
if shutil.which("doxygen") is None:
    sys.exit("docs: doxygen is not installed (Debian: apt-get install doxygen graphviz)")
os.makedirs(os.path.dirname(DOXYGEN_XML), exist_ok=True)
subprocess.run(["doxygen", "Doxyfile"], cwd=HERE, check=True)

# Each header's section opens namespace tdb again, which the C++ domain reports as a duplicate declaration of
# `tdb`; that one kind of warning is expected here (a real duplicate would show up as a missing or doubled entry).
suppress_warnings = ["duplicate_declaration.cpp"]
breathe_projects = {"tdb": DOXYGEN_XML}
breathe_default_project = "tdb"
breathe_domain_by_extension = {"h": "cpp"}
breathe_default_members = ("members",)
cpp_index_common_prefix = ["tdb::"]

# The C++ reference: a page per part of the API (docs/reference/cpp/), each including the generated summary
# table and Breathe directive of its headers (docs/cpp_reference.py); a header no page shows stops the build.
sys.path.insert(0, HERE)
import cpp_reference  # noqa: E402

cpp_reference.flatten_code_lines(DOXYGEN_XML)
HEADERS = sorted(h for h in os.listdir(os.path.join(ROOT, "torch_dlpack_bridge", "include", "torch_dlpack_bridge"))
                 if h.endswith(".h"))
cpp_reference.generate(DOXYGEN_XML, os.path.join(HERE, "_build", "cpp"), HEADERS)

# The command line page shows `--help` as the installed package prints it.
GENERATED = os.path.join(HERE, "_build", "generated")
os.makedirs(GENERATED, exist_ok=True)
for name, args in (("cli-help.txt", ["--help"]), ("cli-bench-help.txt", ["bench", "--help"]),
                   ("cli-check-help.txt", ["check", "--help"])):
    text = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", *args], check=True, capture_output=True,
                          text=True, env=dict(os.environ, COLUMNS="88")).stdout
    with open(os.path.join(GENERATED, name), "w") as f:
        f.write(text)

# Your first kernel shows the pybind11 file whole and the nanobind file as its difference from it.
import difflib  # noqa: E402

with open(os.path.join(ROOT, "examples", "first_kernel", "first_kernel.cpp")) as f, \
        open(os.path.join(ROOT, "examples", "first_kernel", "first_kernel_nb.cpp")) as g, \
        open(os.path.join(GENERATED, "first_kernel_nb.diff"), "w") as out:
    out.writelines(difflib.unified_diff(f.readlines(), g.readlines(), "first_kernel.cpp", "first_kernel_nb.cpp", n=0))

# The support page's wheel matrix, regrouped to fit a desktop's column (wheel_matrix_page.py).
import wheel_matrix_page  # noqa: E402

with open(os.path.join(ROOT, "scripts", "wheel_matrix.md")) as f, \
        open(os.path.join(GENERATED, "wheel_matrix.md"), "w") as out:
    out.write(wheel_matrix_page.page_version(f.read()))

# The Benchmarks page's sections of benchmarks/RESULTS.md, without the scripts' goal lines and the measured commit
# (results_page.py).
import results_page  # noqa: E402

with open(os.path.join(ROOT, "benchmarks", "RESULTS.md")) as f, \
        open(os.path.join(GENERATED, "RESULTS.md"), "w") as out:
    out.write(results_page.page_version(f.read()))

# Break opportunities between names in inline code and signatures, added to the written pages (break_points.py).
import break_points  # noqa: E402


def setup(app):
    app.connect("build-finished", break_points.on_build_finished)
