"""Builds torch_dlpack_bridge: the torch-free `_probe` extension (CPython's limited API, one build for every
Python) and the exchange table library, once per torch it should serve (torch_dlpack_bridge/_build.py).

Which torch the table is built for:
- TDB_TORCH_SITES=dir1:dir2:... (scripts/build_wheels.sh): each dir holds an unpacked torch wheel; the wheel
  ships one library per torch minor and never compiles at import for those.
- otherwise the torch importable here, if any: `pip install --no-build-isolation .` (the developer path)
  builds for the torch you run.
- otherwise none: with pip's default build isolation torch is not importable here (it is not a build
  requirement, so no other torch is downloaded into the build environment) and the package builds its table
  for the installed torch at first import, into a per-user cache.
"""

import importlib.util
import os
import re
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "torch_dlpack_bridge")


def load_build_module():
    """torch_dlpack_bridge/_build.py by path: importing the package would import torch and load a table."""
    spec = importlib.util.spec_from_file_location("tdb_build", os.path.join(PACKAGE, "_build.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_build = load_build_module()


def table_targets():
    sites = [s for s in os.environ.get("TDB_TORCH_SITES", "").split(os.pathsep) if s]
    if sites:
        return [_build.unpacked_torch(site) for site in sites]
    try:
        return [_build.installed_torch()]
    except ImportError:
        return []


# The public repository: the one place its address is written. The project's URLs and the README's links on
# PyPI come from it; the docs are its GitHub Pages site (.github/workflows/release.yml publishes them).
REPOSITORY = "https://github.com/torch-dlpack-bridge/torch_dlpack_bridge"
VERSION = _build.PACKAGE_VERSION  # the one place the version is written; a release's tag is v<VERSION>


def project_urls():
    owner, name = REPOSITORY.rstrip("/").split("/")[-2:]
    return {"Documentation": f"https://{owner}.github.io/{name}/", "Source": REPOSITORY,
            "Issues": f"{REPOSITORY}/issues", "Changelog": f"{REPOSITORY}/blob/v{VERSION}/CHANGELOG.md"}


def long_description():
    """README.md as PyPI shows it: a relative link (docs/..., benchmarks/...) points to that file in the
    repository at this release's tag; absolute links and links within the page stay as written."""
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return re.sub(r"\]\((?![a-zA-Z][a-zA-Z0-9+.-]*:|#|/)([^)\s]+)\)",
                  lambda m: f"]({REPOSITORY}/blob/v{VERSION}/{m.group(1)})", text)


class BuildWithTables(build_ext):
    """build_ext, then one table library per target torch into torch_dlpack_bridge/_lib/."""

    def run(self):
        super().run()
        in_place = self.inplace or getattr(self, "editable_mode", False)
        out_dir = os.path.join(PACKAGE if in_place else os.path.join(self.build_lib, "torch_dlpack_bridge"), "_lib")
        targets = table_targets()
        for target in targets:
            path = os.path.join(out_dir, target.library_name)
            print(f"building {path} for torch {target.version}")
            _build.compile_table(target, path, jobs=int(os.environ.get("MAX_JOBS", "0")) or None,
                                 src=os.path.join(HERE, "csrc"))
        if targets:  # the record of what the libraries cover (the loader and scripts/torch_watch.py read it)
            with open(os.path.join(out_dir, _build.VERSIONS_RECORD), "w") as f:
                f.write("".join(f"{target.version}\n" for target in targets))

    def get_outputs(self):
        libs = os.path.join(self.build_lib, "torch_dlpack_bridge", "_lib")
        targets = table_targets()
        return super().get_outputs() + [os.path.join(libs, t.library_name) for t in targets] + (
            [os.path.join(libs, _build.VERSIONS_RECORD)] if targets else [])


class BuildWithAutoloadHook(build_py):
    """build_py, plus the autoload hook at the top of site-packages: the module and the two start-up files that
    install it (.pth for CPython <= 3.14, .start for 3.15+; autoload/ in the checkout), so that importing
    torch publishes the table in every process."""

    def run(self):
        super().run()
        # An editable install's wheel is assembled from install's folder, not from build_lib.
        root = (self.get_finalized_command("install").install_lib if getattr(self, "editable_mode", False)
                else self.build_lib)
        for name in AUTOLOAD_FILES:
            self.copy_file(os.path.join(HERE, "autoload", name), os.path.join(root, name))


AUTOLOAD_FILES = ("torch_dlpack_bridge_autoload.pth", "torch_dlpack_bridge_autoload.start",
                  "_torch_dlpack_bridge_autoload.py")
sanitize = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"] if _build.sanitized() else []
# One abi3 wheel serves every CPython with a GIL from 3.9. A free-threaded CPython has no limited API (nor
# accepts abi3 wheels): there the probe is built for that interpreter, and so is the wheel (cp313t, ...).
limited_api = _build.running_python_abi() == "gil"
setup(
    version=VERSION,
    long_description=long_description(),
    long_description_content_type="text/markdown",
    # Home-page: the one URL `pip show` prints; older pip (Debian 12's 23.0.1) finds it nowhere else, as it reads
    # no Project-URL there. Newer pip and PyPI read it too.
    url=REPOSITORY,
    project_urls=project_urls(),
    ext_modules=[
        Extension(
            "torch_dlpack_bridge._probe",
            ["csrc/probe.cpp"],
            include_dirs=[os.path.join(PACKAGE, "include")],
            define_macros=[("Py_LIMITED_API", "0x03090000")] if limited_api else [],
            language="c++",
            extra_compile_args=["-std=c++17", "-O3", "-fvisibility=hidden", "-Wall", "-Wextra"] + sanitize,
            extra_link_args=["-fsanitize=address,undefined"] if sanitize else [],
            py_limited_api=limited_api,
        ),
    ],
    cmdclass={"build_ext": BuildWithTables, "build_py": BuildWithAutoloadHook},
    options={"bdist_wheel": {"py_limited_api": "cp39"}} if limited_api else {},
)
