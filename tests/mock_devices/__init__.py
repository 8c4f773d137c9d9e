"""Stand-ins for devices the test machines lack (MPS, XPU, ROCm before torch 2.11); see mock_devices.cpp.

Load it only in a subprocess: it registers device guards for the whole process. ``load()`` builds it once
(into TORCH_EXTENSIONS_DIR) together with this checkout's csrc/stream.cpp, mapping.cpp and errors.cpp built
with the pre-2.11 stream path; ``fake_libtorch_hip(directory)`` builds the stand-in libtorch_hip.so.
"""

import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CSRC = os.path.join(ROOT, "csrc")

# What the stand-in libtorch_hip.so returns as device i's current stream.
FAKE_HIP_STREAM_BASE = 0x5EED0000

_FAKE_HIP_SOURCE = """
#include <stdint.h>
int32_t aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream) {
  *ret_stream = (void*)(uintptr_t)(0x5EED0000u + (uint32_t)device_index);
  return 0;
}
"""


def load():
    from torch.utils.cpp_extension import load as build

    return build(
        name="tdb_mock_devices",
        sources=[os.path.join(HERE, "mock_devices.cpp")]
        + [os.path.join(CSRC, name) for name in ("stream.cpp", "mapping.cpp", "errors.cpp")],
        extra_include_paths=[CSRC, os.path.join(ROOT, "torch_dlpack_bridge", "include")],
        extra_cflags=["-O1", "-DTDB_TEST_LEGACY_STREAM_PATH"],
        verbose=False,
    )


def fake_libtorch_hip(directory):
    """Builds a libtorch_hip.so exporting torch's C shim for the current stream; returns its path. Load it
    (RTLD_GLOBAL) before the stand-ins: the table's reference to the shim binds when they load."""
    source = os.path.join(directory, "fake_hip.c")
    library = os.path.join(directory, "libtorch_hip.so")
    with open(source, "w") as f:
        f.write(_FAKE_HIP_SOURCE)
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libtorch_hip.so", "-o", library, source], check=True)
    return library
