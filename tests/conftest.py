"""Shared fixtures: the tables under test and the torch-free C consumer that calls them."""

import os
import re
import resource
import subprocess
import sys

import pytest
import torch

import processes
import torch_dlpack_bridge
from torch_dlpack_bridge import _probe

# DLPack device types and type codes used across the tests (values from the DLPack 1.3 header).
kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLExtDev, kDLOneAPI = 1, 2, 3, 4, 12, 14

# (major, minor) of the running torch, which is the torch the extension was built against (the package refuses
# to import under another). Compare it as a pair, as TDB_TORCH_AT_LEAST does in csrc/mapping.h.
TORCH_VERSION = tuple(int(part) for part in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())


def torch_at_least(major, minor):
    return TORCH_VERSION >= (major, minor)


# From torch 2.11 the table reports raw stream handles of every accelerator (c10::Stream::native_handle);
# before, only CUDA's, and any other device's current_work_stream raises exactly this RuntimeError.
TORCH_HAS_RAW_STREAM_HANDLES = torch_at_least(2, 11)
NO_RAW_STREAM_HANDLE = r"this torch \(< 2\.11\) offers no raw stream handle for {} devices"


# ---- the suite leaves no process behind --------------------------------------------------------------------

SESSION = f"{os.getpid()}-{os.urandom(4).hex()}"
"""This session's token in processes.MARKER: every process the tests start carries it in its environment."""
os.environ[processes.MARKER] = f"{SESSION}:"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The processes started while `item` runs (its fixtures included) carry its id."""
    os.environ[processes.MARKER] = f"{SESSION}:{item.nodeid}"
    try:
        yield
    finally:
        os.environ[processes.MARKER] = f"{SESSION}:"


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind():
    """Fails the run where a process the tests started still runs once they are done (after every other fixture:
    this one is set up first), naming the test that started it; such a process is killed, then reported. A fake
    compiler's `sleep 600` left by a build that killed its command's pid and not its process group, say, would
    otherwise run on unseen after the suite passed."""
    yield
    if not os.path.isdir("/proc/self"):
        return
    left = processes.left_behind(SESSION)
    if not left:
        return
    lines = [f"  pid {pid}, started during {test}: {processes.command_line(pid)[:200]}"
             for pid, test in sorted(left.items())]
    import signal

    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    pytest.fail(f"{len(left)} process(es) started by the tests still running at the end of the session (now "
                "killed):\n" + "\n".join(lines), pytrace=False)


@pytest.fixture(scope="session")
def probe():
    """A C consumer compiled against the DLPack header only: every call goes through a function pointer."""
    return _probe


@pytest.fixture(scope="session")
def api():
    """This project's table, as the capsule a consumer finds on a type."""
    return torch_dlpack_bridge.exchange_api()


@pytest.fixture(scope="session")
def native():
    """torch's own table (torch >= 2.10), the oracle for differential tests."""
    capsule = torch_dlpack_bridge._native_capsule()
    if capsule is None:
        pytest.skip("this torch has no native DLPack exchange table")
    return capsule


@pytest.fixture
def bridge_published():
    """Publishes this project's table under both names for one test (the default policy), and restores it."""
    torch_dlpack_bridge.install(prefer="bridge")
    yield
    torch_dlpack_bridge.install()


# Every torch dtype DLPack can describe, with its DLPack 1.3 (code, bits, lanes); export, import and
# allocation tests share it. float4_e2m1fn_x2 is one byte holding two fp4 values: two 4-bit lanes.
_DLPACK_DTYPE_NAMES = [
    ("bool", (6, 8, 1)),
    ("uint8", (1, 8, 1)), ("uint16", (1, 16, 1)), ("uint32", (1, 32, 1)), ("uint64", (1, 64, 1)),
    ("int8", (0, 8, 1)), ("int16", (0, 16, 1)), ("int32", (0, 32, 1)), ("int64", (0, 64, 1)),
    ("float16", (2, 16, 1)), ("float32", (2, 32, 1)), ("float64", (2, 64, 1)),
    ("bfloat16", (4, 16, 1)),
    ("complex32", (5, 32, 1)), ("complex64", (5, 64, 1)), ("complex128", (5, 128, 1)),
    ("float8_e4m3fn", (10, 8, 1)), ("float8_e4m3fnuz", (11, 8, 1)), ("float8_e5m2", (12, 8, 1)),
    ("float8_e5m2fnuz", (13, 8, 1)), ("float8_e8m0fnu", (14, 8, 1)),
    ("float4_e2m1fn_x2", (17, 4, 2)),
]
DLPACK_DTYPES = {getattr(torch, name): dl for name, dl in _DLPACK_DTYPE_NAMES if hasattr(torch, name)}
# The DLPack 1.3 dtypes whose torch dtype this torch does not have yet (float8_e8m0fnu before 2.7,
# float4_e2m1fn_x2 before 2.8): the table must refuse them cleanly. Empty on a recent torch.
MISSING_DLPACK_DTYPES = {name: dl for name, dl in _DLPACK_DTYPE_NAMES if not hasattr(torch, name)}
FLOAT32 = (2, 32, 1)
CPU = (kDLCPU, 0)


def cuda_device_0_expectation():
    """(exception class, message pattern) of our table for device (kDLCUDA, 0) (a stream, an allocation, an
    import) on this torch, or None if it has a CUDA GPU: a CPU-only build has no cuda backend, a CUDA build
    on a machine without GPU has no device 0, a ROCm build exports kDLROCM and has no kDLCUDA."""
    if torch.version.hip is not None:
        return BufferError, r"DLPack device type 2 \(cuda\) has no torch equivalent"
    if not torch.backends.cuda.is_built():
        return BufferError, "this torch has no cuda backend"
    if torch.cuda.device_count() == 0:
        return ValueError, r"no cuda device 0 \(torch sees 0\)"
    return None


def run_python(code, **env):
    """Runs `code` in a fresh interpreter that imports this checkout's package (extra environment variables
    in `env`), with core dumps off: some tests show that torch's own table crashes where ours raises. The
    autoload hook is off unless `env` turns it on: these scenarios import the package themselves, after
    preparing torch (tests/test_autoload.py covers the hook)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=python_env(**env),
                          timeout=300, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))


def python_env(**env):
    """The environment run_python gives a fresh interpreter: this checkout's package first on the path, the
    autoload hook off, then `env`."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(torch_dlpack_bridge.__file__)))
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
                    TORCH_DLPACK_BRIDGE_AUTOLOAD="0")
    full_env.update(env)
    return full_env


@pytest.fixture(scope="session")
def tdbdev():
    """The tdbdev PrivateUse1 test backend (tests/privateuse1_backend), built and loaded once per session."""
    from privateuse1_backend import load

    return load()


@pytest.fixture
def tdbdev_state(tdbdev):
    """Leaves tdbdev's current device and each device's current stream as the test found them."""
    devices = range(tdbdev.device_count())
    device = tdbdev.current_device()
    streams = [tdbdev.current_stream_id(i) for i in devices]
    yield
    for i, stream in zip(devices, streams):
        tdbdev.set_current_stream(i, stream)
    tdbdev.set_device(device)


@pytest.fixture(scope="session")
def typed_modules(tmp_path_factory):
    """{flavour: module}: tests/typed_tensor_module.cpp built once per binding library (tests/typed_tensor_build.py)."""
    import typed_tensor_build
    from example_packages import import_from

    if typed_tensor_build.compiler() is None:
        pytest.fail("no C++ compiler on PATH: the typed parameters cannot be tested")
    paths = typed_tensor_build.build(tmp_path_factory.mktemp("typed_tensor"))
    return {flavour: import_from(os.path.dirname(path), f"tdb_typed_{flavour}") for flavour, path in paths.items()}


@pytest.fixture(scope="module")
def mock_build():
    """Builds the XPU and MPS stand-ins (tests/mock_devices) once in this process (cached on disk), so each
    subprocess of tests/test_mock_devices.py and tests/test_self_check.py only loads them."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    try:
        import mock_devices
        mock_devices.load()
    finally:
        sys.path.remove(here)
