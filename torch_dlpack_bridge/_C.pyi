"""The compiled exchange table (csrc/)."""

from typing import Any, Dict

def exchange_api() -> Any:
    """The DLPackExchangeAPI table as a PyCapsule named "dlpack_exchange_api"."""

def exchange_api_address() -> int:
    """The address of the DLPackExchangeAPI table."""

def build_info() -> Dict[str, Any]:
    """torch_version, cxx11_abi, compiler and dlpack_version the extension was compiled with."""
