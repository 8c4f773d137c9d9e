import torch  # with the package installed, this alone publishes the table on torch.Tensor
import torch_dlpack_bridge

for attribute, provider in torch_dlpack_bridge.active_provider().items():
    print(attribute, provider)
# __dlpack_c_exchange_api__ torch_dlpack_bridge
# __c_dlpack_exchange_api__ torch_dlpack_bridge
