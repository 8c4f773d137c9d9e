/*!
 * \file torch_dlpack_bridge/consumer.h
 * \brief Header-only C++17 helpers for writing kernels that take tensors of any DLPack producer
 *        (torch.Tensor, ...) through the DLPack C exchange table, from a CPython extension.
 *
 * Depends only on Python.h and torch_dlpack_bridge/dlpack.h: no torch headers, no torch link.
 *
 * The one include a raw-CPython kernel needs: it gathers the headers that hold one job each, which a kernel
 * never includes itself: errors.h (tdb::Error, tdb::guard), dltensor.h (dtype constants, numel,
 * is_contiguous, for_each_offset, data_ptr), table.h (finding and caching a type's exchange table),
 * protocol.h (the `__dlpack__` fallback), managed.h (tdb::ManagedTensor), view.h (tdb::TensorView),
 * allocate.h (current_stream, allocate), checks.h (the check_* functions) and names.h (readable names).
 *
 * Error convention: every helper that can fail throws `tdb::Error`. Wrap the body of each extension
 * function in `tdb::guard`, which turns any C++ exception into a Python exception and returns NULL:
 *
 * \code{.cpp}
 * static PyObject* axpy_(PyObject*, PyObject* args) {
 *   return tdb::guard([&]() -> PyObject* {
 *     tdb::TensorView x(PyTuple_GET_ITEM(args, 1), "x");  // borrowed, valid in this call
 *     tdb::check_dtype(x, tdb::kFloat32);                 // TypeError "argument 'x': ..."
 *     // ...
 *     Py_RETURN_NONE;
 *   });
 * }
 * \endcode
 *
 * Producers: a tensor whose type publishes an exchange table (`__dlpack_c_exchange_api__`) is taken
 * through the table (tens of nanoseconds). Any other object whose type has a `__dlpack__` method (NumPy, JAX,
 * CuPy, older libraries) is taken through the standard Python protocol instead (microseconds): the view then
 * owns the exported tensor, which keeps the producer's data alive for as long as the view. Both names are
 * looked up on the type, as Python looks up special methods, and a class (`torch.Tensor`) is never a tensor.
 *
 * Threads: every function here must be called from a thread attached to the interpreter (holding the GIL,
 * or on a free-threaded CPython, any Python thread), as the exchange table requires. The per-module state
 * (the per-type table cache, the binding headers' translator registration) is thread-safe without the GIL:
 * atomics on the lookup path, written once, so free-threaded CPython (3.13t, 3.14t) is supported. The one
 * exception: a `tdb::ManagedTensor` may be destroyed (or reset()) on any thread, with or without the GIL,
 * as DLPack deleters may run anywhere.
 */
#ifndef TORCH_DLPACK_BRIDGE_CONSUMER_H_
#define TORCH_DLPACK_BRIDGE_CONSUMER_H_

// One job per header (each includes what it uses); this header gathers them for a raw-CPython kernel.
#include "torch_dlpack_bridge/dlpack.h"
#include "torch_dlpack_bridge/names.h"
#include "torch_dlpack_bridge/errors.h"
#include "torch_dlpack_bridge/dltensor.h"
#include "torch_dlpack_bridge/table.h"
#include "torch_dlpack_bridge/protocol.h"
#include "torch_dlpack_bridge/managed.h"
#include "torch_dlpack_bridge/view.h"
#include "torch_dlpack_bridge/allocate.h"
#include "torch_dlpack_bridge/checks.h"

#endif  // TORCH_DLPACK_BRIDGE_CONSUMER_H_
