"""The kernels of axpy_compile._kernels as torch custom ops, and the functions to call.

The kernel binary is torch-free (pybind11 and torch_dlpack_bridge's headers); this file
is the only place that knows torch. Inside torch.compile, tensors are FakeTensors without
data, so the compiled graph must hold an op whose output torch can describe without
running the kernel: a custom op with a fake implementation. In eager mode the op's
dispatch costs microseconds per call, so axpy_ and scaled_copy call the kernel directly
unless torch is compiling, a tensor is a subclass (a FakeTensor, ...) or autograd needs
the op (direct() below; what that gives up: the README's "Kernels under torch.compile").
"""
import torch

from . import _kernels


@torch.library.custom_op("axpy_compile::axpy_", mutates_args=("y",), device_types="cpu")
def axpy_op(a: float, x: torch.Tensor, y: torch.Tensor) -> None:
    """y = a*x + y in place, as a custom op (mutates y: torch.compile functionalizes
    it)."""
    _kernels.axpy_(a, x, y)


@axpy_op.register_fake
def _(a, x, y):
    # FakeTensors have no data: only check what the kernel would check about shapes.
    # Nothing is returned.
    torch._check(x.dim() == 1 and x.shape == y.shape,
                 lambda: "axpy_: x and y must be 1-D of the same length")


@torch.library.custom_op("axpy_compile::scaled_copy", mutates_args=(), device_types="cpu")
def scaled_copy_op(a: float, x: torch.Tensor) -> torch.Tensor:
    """A new contiguous float32 tensor a*x, as a custom op (differentiable in x)."""
    return _kernels.scaled_copy(a, x)


@scaled_copy_op.register_fake
def _(a, x):
    # What the kernel returns, described without running it: contiguous, x's shape,
    # float32.
    return torch.empty(x.shape, dtype=torch.float32, device=x.device)


def _setup_context(ctx, inputs, output):
    ctx.a = inputs[0]


def _backward(ctx, grad):
    # d(a*x)/dx = a: the kernel is its own derivative
    return None, scaled_copy_op(ctx.a, grad)


scaled_copy_op.register_autograd(_backward, setup_context=_setup_context)


# Looked up once: direct() runs on every eager call (Dynamo still sees
# torch.compiler.is_compiling itself).
_is_compiling = torch.compiler.is_compiling
_is_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor


def direct(*tensors: torch.Tensor) -> bool:
    """Whether a call may go straight to the kernel: torch is not compiling (while Dynamo
    traces, is_compiling() is True, so the graph gets the op), every tensor is a plain
    torch.Tensor (FakeTensors, functional tensors and other subclasses take the op and
    its dispatch), and autograd has nothing to record."""
    if _is_compiling():
        return False
    grad = _is_grad_enabled()
    for t in tensors:
        if type(t) is not _Tensor or (grad and t.requires_grad):
            return False
    return True


def axpy_(a: float, x: torch.Tensor, y: torch.Tensor) -> None:
    """y = a*x + y in place.

    Example: y = torch.ones(3); axpy_(2.0, torch.arange(3.0), y)"""
    if direct(x, y):
        return _kernels.axpy_(a, x, y)  # eager: the kernel, no dispatcher
    axpy_op(a, x, y)  # traced into the graph, or dispatched (autograd, modes, subclasses)


def scaled_copy(a: float, x: torch.Tensor) -> torch.Tensor:
    """A new contiguous float32 tensor a*x. Example: scaled_copy(2.0, torch.ones(3))"""
    if direct(x):
        return _kernels.scaled_copy(a, x)
    return scaled_copy_op(a, x)
