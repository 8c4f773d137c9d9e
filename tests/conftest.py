"""Shared fixtures: the tables under test and the torch-free C consumer that calls them."""

import pytest
import torch

import torch_dlpack_bridge
from torch_dlpack_bridge import _probe

# DLPack device types and type codes used across the tests (values from the DLPack 1.3 header).
kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLExtDev, kDLOneAPI = 1, 2, 3, 4, 12, 14


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
    """Publishes this project's table under both names for one test, then restores the default policy."""
    torch_dlpack_bridge.install(prefer="bridge")
    yield
    torch_dlpack_bridge.install(prefer="torch")
