"""axpy kernels from a torch-free binary, usable in eager mode and under torch.compile
(see ops.py)."""
from .ops import axpy_, axpy_op, direct, scaled_copy, scaled_copy_op

__all__ = ["axpy_", "axpy_op", "direct", "scaled_copy", "scaled_copy_op"]
