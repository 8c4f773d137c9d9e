"""Publishes torch_dlpack_bridge's exchange table the moment torch finishes importing, in every process of the
environment, whatever imports torch and in which order (a consumer such as tvm-ffi that looks for the table
when it first meets torch then finds it).

Installed at the top of site-packages with torch_dlpack_bridge_autoload.pth, which imports this module at
interpreter start-up. It does not import torch: it puts a finder first on sys.meta_path that answers only for
"torch", lets the other finders find it, and runs ``import torch_dlpack_bridge`` right after torch's own module
has executed. Nothing here may break start-up or torch's import: a failure becomes one warning.

``TORCH_DLPACK_BRIDGE_AUTOLOAD=0`` turns it off (then ``import torch_dlpack_bridge`` publishes the table, as
before). ``TORCH_DLPACK_BRIDGE_PREFER`` applies as it does to an explicit import.
"""

import os
import sys


class _PublishAfterTorch:
    """A meta path finder for "torch" alone: one string comparison for every other import."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)  # once: the next lookup of "torch" (or ours, below) skips this finder
            import importlib.util

            spec = importlib.util.find_spec("torch")
            exec_module = getattr(spec.loader, "exec_module", None) if spec is not None else None
            if exec_module is None:
                return spec

            def exec_then_publish(module):
                exec_module(module)  # torch's own import; its errors propagate as usual
                _publish()

            spec.loader.exec_module = exec_then_publish
            return spec
        except Exception as error:  # never in the way of importing torch
            _warn(error)
            return None


def _publish():
    try:
        import torch_dlpack_bridge  # noqa: F401  (its import publishes the table)
    except Exception as error:
        _warn(error)


def _warn(error):
    import warnings

    warnings.warn(f"torch_dlpack_bridge: the exchange table was not published when torch was imported: "
                  f"{type(error).__name__}: {error} (TORCH_DLPACK_BRIDGE_AUTOLOAD=0 turns this hook off)",
                  RuntimeWarning, stacklevel=2)


if os.environ.get("TORCH_DLPACK_BRIDGE_AUTOLOAD", "1") != "0" and "torch" not in sys.modules:
    sys.meta_path.insert(0, _PublishAfterTorch())
