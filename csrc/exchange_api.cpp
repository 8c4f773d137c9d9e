// The table itself: a static instance, alive for the whole process as the spec requires.
#include "bridge.h"

namespace tdb {

DLPackExchangeAPI g_exchange_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, /*prev_api=*/nullptr},
    managed_tensor_allocator,
    managed_tensor_from_py_object_no_sync,
    managed_tensor_to_py_object_no_sync,
    dltensor_from_py_object_no_sync,
    current_work_stream,
};

}  // namespace tdb
