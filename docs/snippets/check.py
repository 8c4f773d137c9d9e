import torch  # with the package installed, this alone publishes the table on torch.Tensor
import torch_dlpack_bridge

print(torch_dlpack_bridge.active_provider())
# {'__dlpack_c_exchange_api__': 'torch_dlpack_bridge', '__c_dlpack_exchange_api__': 'torch_dlpack_bridge'}
