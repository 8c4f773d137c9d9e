"""The conformance checker (torch_dlpack_bridge.check): this project's table passes every case; fake producers
with one planted defect each (tests/planted.py) fail the case that pins it; torch's own table shows its known
defects; a producer that crashes fails its case without ending the check."""

import json
import os
import subprocess
import sys

import pytest
import torch

import planted
import torch_dlpack_bridge
from torch_dlpack_bridge.check import NAMES, cases, runner
from torch_dlpack_bridge.check.pytest_entry import conformance_tests

PLANTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "planted.py")
REPO = os.path.dirname(os.path.dirname(PLANTED))
HAS_NATIVE = torch_dlpack_bridge._native_capsule() is not None


@pytest.fixture(scope="module", autouse=True)
def planted_library(tmp_path_factory):
    """tests/planted_producer.c built once; its path in the environment of this process and its children."""
    path = planted.build(str(tmp_path_factory.mktemp("planted")))
    old = os.environ.get(planted.LIB_ENV)
    os.environ[planted.LIB_ENV] = path
    yield path
    if old is None:
        del os.environ[planted.LIB_ENV]
    else:
        os.environ[planted.LIB_ENV] = old


# This project's table passes every case (through the documented pytest entry).
test_this_projects_table = conformance_tests("torch")


def test_every_case_has_a_planted_defect():
    assert sorted(case for _, case in planted.DEFECTS.values() if case) == sorted(NAMES)


def test_planted_table_without_defect_passes():
    """The wrapper that carries the defects is itself conformant: each FAIL below is its defect's doing."""
    report = runner.run(f"{PLANTED}:none")
    assert report["error"] is None, report["error"]
    assert {r["status"] for r in report["results"]} == {"PASS"}, [r for r in report["results"] if r["status"] != "PASS"]


def run_in_process(defect, case):
    target = planted.Planted(defect)
    target.setup()
    ctx = cases.Context(target, exit_probe_command=runner.command("exit-probe", f"{PLANTED}:{defect}"))
    return cases.run_case(ctx, case)


# In a separate interpreter: crashes, and a use-after-free that only a fresh heap shows reliably.
SEPARATE = planted.CRASHING | {"export_drops_memory"}


@pytest.mark.parametrize("defect", sorted(set(planted.DEFECTS) - {"none"}))
def test_planted_defect_fails_its_case(defect):
    case = planted.DEFECTS[defect][1]
    if defect in SEPARATE:
        report = runner.run(f"{PLANTED}:{defect}", [case])
        assert report["error"] is None, report["error"]
        result = report["results"][0]
    else:
        result = run_in_process(defect, case)
    assert result["case"] == case
    assert result["status"] == "FAIL", result
    assert "expected" in result["detail"] or "took the interpreter down" in result["detail"], result


def test_a_crash_fails_its_case_and_the_check_goes_on():
    report = runner.run(f"{PLANTED}:deleter_needs_gil",
                        ["header.version", "ownership.other-thread", "header.functions"])
    statuses = {r["case"]: (r["status"], r["detail"]) for r in report["results"]}
    assert statuses["header.version"][0] == "PASS" and statuses["header.functions"][0] == "PASS", statuses
    assert statuses["ownership.other-thread"][0] == "FAIL"
    assert "took the interpreter down (signal SIGABRT)" in statuses["ownership.other-thread"][1]


def test_command_line_exit_status_and_json():
    ok = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "check", "--case", "header.version", "--json"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["results"] == [{"case": "header.version", "status": "PASS", "detail": "1.3"}]
    bad = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "check", f"{PLANTED}:old_version",
                          "--case", "header.version"], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL  header.version" in bad.stdout and "1.1 seen" in bad.stdout
    unknown = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "check", "no-such-framework"],
                             capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown target" in unknown.stderr


@pytest.mark.skipif(not HAS_NATIVE, reason="this torch has no table of its own (torch < 2.10)")
def test_torch_native_table_shows_its_known_defects():
    """Differential: torch's own table (2.13) exports conj and neg views as if plain, raises RuntimeError where
    __dlpack__ raises BufferError, and imports a major-version-2 tensor or leaks a refused one."""
    report = runner.run("torch-native")
    results = {r["case"]: r for r in report["results"]}
    refusals = results["export.refuses-undescribable"]
    assert refusals["status"] == "FAIL" and "an export seen for conj view, neg view" in refusals["detail"]
    assert results["import.owns-on-failure"]["status"] == "FAIL"
    assert results["export.managed"]["status"] == "FAIL" and "RuntimeError" in results["export.managed"]["detail"]
    for case in ("publish.capsule", "header.version", "header.prev-api", "header.functions", "import.shares-memory",
                 "allocator.prototype", "threads.concurrent-exports"):
        assert results[case]["status"] == "PASS", results[case]


def test_checker_runs_without_torch():
    """A framework's environment need not have torch: the checker, run by path, imports none of it."""
    script = os.path.join(REPO, "torch_dlpack_bridge", "check", "__main__.py")
    block = "import runpy, sys; sys.modules['torch'] = None; sys.argv = ['check', '--help']; " \
            f"runpy.run_path({script!r}, run_name='__main__')"
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "threads.concurrent-exports" in result.stdout


def test_a_tensor_factory_is_a_target():
    """`module:function` may name a factory `function(dtype, shape)`: its dtypes in a few shapes are the corpus."""
    report = runner.run(f"{PLANTED}:make_tensor", ["export.managed", "allocator.prototype"])
    assert report["error"] is None, report["error"]
    assert [r["status"] for r in report["results"]] == ["PASS", "PASS"], report["results"]
    assert report["versions"] == {"torch": torch.__version__}
    assert int(report["results"][0]["detail"].split()[0]) >= 4 * 12  # dtypes x the four shapes
