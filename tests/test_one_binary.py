"""One kernel binary for every torch: the pybind11 example is built once (against torch_dlpack_bridge's
headers only), and that same .so then runs under the torch of this environment (2.13: through the exchange
table, this project's or torch's own) and under another torch minor in a second venv (2.9.1 by default:
no native table and no torch_dlpack_bridge built for it, so through the standard __dlpack__ protocol).

The second torch is opt-in, so that the README's test command downloads nothing: TDB_TEST_SECOND_TORCH=1 makes
a venv and runs `pip install torch==2.9.1 numpy` from the registry (on Linux that is the CUDA build with its
nvidia-* packages, about 3 GB to download and 6.8 GB on disk, because a CUDA torch does not import without its
CUDA libraries and the registry has no CPU build); the venv is removed when the test is done. .ci/run runs it.
It is skipped, saying why, where the registry cannot be reached. TDB_ONE_BINARY_TORCH picks the other torch
version; TDB_ONE_BINARY_PYTHON names an existing interpreter that already has it (no venv, no download, no
opt-in needed); TDB_ONE_BINARY_FIND_LINKS a directory of local wheels. TDB_ONE_BINARY_WITH_BRIDGE=1 also
builds torch_dlpack_bridge for the other torch (several minutes of compiling, so not in CI by default) and
checks that the same binary then goes through this project's table there too.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from example_packages import pip_install, shared_objects

OTHER_TORCH = os.environ.get("TDB_ONE_BINARY_TORCH", "2.9.1")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in each interpreter: imports the one binary from SITE and reports what it computed.
SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import torch
    if sys.argv[2] == "bridge":
        import torch_dlpack_bridge
        assert torch_dlpack_bridge.active_provider()["__dlpack_c_exchange_api__"] == "torch_dlpack_bridge"
    sys.path.insert(0, sys.argv[1])
    import axpy_pybind11 as m

    report = {"torch": torch.__version__, "file": m.__file__,
              "table": getattr(torch.Tensor, "__dlpack_c_exchange_api__", None) is not None}
    x, y = torch.arange(4.0), torch.ones(4)
    m.axpy_(2.0, torch.arange(8.0)[::2], y)  # a strided x
    report["axpy_torch"] = y.tolist()
    a = np.ones(3, dtype=np.float32)
    m.axpy_(0.5, np.arange(3, dtype=np.float32), a)
    report["axpy_numpy"] = a.tolist()
    report["sum"] = m.sum(torch.arange(10.0).reshape(2, 5).t())
    try:
        report["scaled_copy"] = [type(r).__name__ for r in [m.scaled_copy(3.0, x)]] + m.scaled_copy(3.0, x).tolist()
    except TypeError as e:
        report["scaled_copy"] = "TypeError: " + str(e)
    try:
        m.axpy_(1.0, torch.ones(4, dtype=torch.float64), y)
    except TypeError as e:
        report["error"] = str(e)
    print("REPORT " + json.dumps(report))
""")


def run_binary(python, site, mode, env=None):
    # cwd: not the repository, whose torch_dlpack_bridge (built for this torch) would shadow PYTHONPATH's.
    res = subprocess.run([python, "-c", SCRIPT, site, mode], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **(env or {})), cwd=os.path.dirname(site))
    assert res.returncode == 0, f"{python} ({mode}) exit code {res.returncode}\n{res.stdout}\n{res.stderr}"
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT "):])


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    site = pip_install("axpy_pybind11", tmp_path_factory.mktemp("one_binary"))
    (so,) = shared_objects(site, "axpy_pybind11")
    return site, so


SECOND_TORCH_ENV = "TDB_TEST_SECOND_TORCH"


@pytest.fixture(scope="module")
def other_python(tmp_path_factory):
    """An interpreter with the other torch: TDB_ONE_BINARY_PYTHON, or (opt-in) a venv made for the test and
    removed after it."""
    given = os.environ.get("TDB_ONE_BINARY_PYTHON")
    if given:
        yield given
        return
    if os.environ.get(SECOND_TORCH_ENV) != "1":
        pytest.skip(f"opt-in ({SECOND_TORCH_ENV}=1): installs torch {OTHER_TORCH} from the registry into a "
                    f"temporary venv (the CUDA build: about 3 GB to download, 6.8 GB on disk); .ci/run runs it")
    venv = tmp_path_factory.mktemp("venv_torch_" + OTHER_TORCH.replace(".", "_"))
    try:
        yield install_other_torch(venv)
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # pytest keeps its last three temporary folders: not 3 x 6.8 GB


def install_other_torch(venv):
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    cmd = [python, "-m", "pip", "install", "--quiet", f"torch=={OTHER_TORCH}", "numpy"]
    if os.environ.get("TDB_ONE_BINARY_FIND_LINKS"):
        cmd += ["--find-links", os.environ["TDB_ONE_BINARY_FIND_LINKS"]]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if res.returncode != 0:
        unreachable = ("No matching distribution", "Could not find a version", "NewConnectionError", "Network")
        if any(text in res.stderr for text in unreachable):
            pytest.skip(f"cannot install torch {OTHER_TORCH} from the registry here: {res.stderr.strip()[-300:]}")
        pytest.fail(f"{' '.join(cmd)} failed:\n{res.stderr}")
    return python


def test_binary_links_nothing_of_torch(binary):
    _, so = binary
    needed = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
    assert "NEEDED" in needed and not any(lib in needed for lib in ("libtorch", "libc10", "libshm"))
    undefined = subprocess.run(["nm", "-D", "--undefined-only", "-C", so], capture_output=True, text=True,
                               check=True).stdout
    assert not [s for s in undefined.splitlines() if "c10::" in s or "at::" in s or "torch::" in s]


def test_same_binary_runs_on_two_torch_minors(binary, other_python):
    site, so = binary
    digest = hashlib.sha256(open(so, "rb").read()).hexdigest()
    here_bridge = run_binary(sys.executable, site, "bridge")  # this project's table
    here_native = run_binary(sys.executable, site, "plain",  # torch's own table (torch >= 2.10)
                             env={"TORCH_DLPACK_BRIDGE_AUTOLOAD": "0"})
    other = run_binary(other_python, site, "plain")  # no table at all: __dlpack__
    assert hashlib.sha256(open(so, "rb").read()).hexdigest() == digest  # nothing rebuilt it

    versions = {r["torch"].split("+")[0] for r in (here_bridge, other)}
    assert len(versions) == 2 and OTHER_TORCH in versions  # two different torch releases
    assert {r["torch"].split(".")[1] for r in (here_bridge, other)} == {v.split(".")[1] for v in versions}
    assert here_bridge["table"] and here_native["table"] and not other["table"]
    assert all(r["file"] == so for r in (here_bridge, here_native, other))  # the very same file

    for r in (here_bridge, here_native, other):
        assert r["axpy_torch"] == [1.0, 5.0, 9.0, 13.0]
        assert r["axpy_numpy"] == [1.0, 1.5, 2.0]
        assert r["sum"] == 45.0
        assert r["error"].startswith("axpy_(): incompatible function arguments")  # pybind11's, for a parameter
    for r in (here_bridge, here_native):
        assert r["scaled_copy"] == ["Tensor", 0.0, 3.0, 6.0, 9.0]  # allocated by the producer's table
    # Without a table there is no allocator: refused cleanly, not a crash.
    assert other["scaled_copy"].startswith(
        "TypeError: output: cannot allocate like argument 'x': its producer has no DLPack exchange table")


@pytest.mark.skipif(os.environ.get("TDB_ONE_BINARY_WITH_BRIDGE") != "1",
                    reason="opt-in (TDB_ONE_BINARY_WITH_BRIDGE=1): compiles torch_dlpack_bridge for the other torch")
def test_same_binary_through_this_projects_table_on_the_other_torch(binary, other_python, tmp_path):
    site, so = binary
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(open(os.path.join(REPO, name), "rb").read())
    for cmd in ([other_python, "-m", "pip", "install", "--quiet", "setuptools", "wheel", "ninja"],
                [other_python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", "--target",
                 str(tmp_path / "bridge"), str(src)]):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=dict(os.environ, MAX_JOBS="1"))
        assert res.returncode == 0, res.stdout + res.stderr
    report = run_binary(other_python, site, "bridge", env={"PYTHONPATH": str(tmp_path / "bridge")})
    assert report["torch"].split("+")[0] == OTHER_TORCH and report["table"] and report["file"] == so
    assert report["axpy_torch"] == [1.0, 5.0, 9.0, 13.0] and report["sum"] == 45.0
    assert report["scaled_copy"] == ["Tensor", 0.0, 3.0, 6.0, 9.0]  # this project's allocator, on the other torch
