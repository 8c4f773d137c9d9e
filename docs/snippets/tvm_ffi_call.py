import torch
import tvm_ffi

x = torch.arange(4.0)
# any tvm-ffi function: torch tensors go through the table
echo = tvm_ffi.get_global_func("testing.echo")
# in: managed_tensor_from_py_object_no_sync; out: managed_tensor_to_py_object_no_sync
y = echo(x)
assert type(y) is torch.Tensor and y.data_ptr() == x.data_ptr()  # zero-copy both ways
