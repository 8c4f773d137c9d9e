import torch
import tvm_ffi

x = torch.arange(4.0)
echo = tvm_ffi.get_global_func("testing.echo")  # any tvm-ffi function: torch tensors go through the table
y = echo(x)  # in: managed_tensor_from_py_object_no_sync; out: managed_tensor_to_py_object_no_sync
assert type(y) is torch.Tensor and y.data_ptr() == x.data_ptr()  # zero-copy both ways
