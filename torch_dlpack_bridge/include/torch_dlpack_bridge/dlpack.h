/*!
 * \file torch_dlpack_bridge/dlpack.h
 * \brief The DLPack 1.3 C ABI: tensor descriptors and the exchange table.
 *
 * Written for torch_dlpack_bridge from the DLPack specification. Layouts are the ABI: every struct
 * matches dlpack.h v1.3 byte for byte (checked by static asserts at the end). The declarations sit behind
 * the reference header's own include guard, so a translation unit that already included an upstream
 * dlpack.h >= 1.2 sees one definition of each type; an older upstream header is rejected with #error.
 * The names DLPack's main branch added after 1.3 without a version bump (kDLBcomplex 18; kDLTPU 19,
 * kDLTPUHost 20, kDLAscend 21) exist only where this header defined the types: code that must also compile
 * after an upstream 1.3 header writes their numbers.
 *
 * Ownership in one sentence: a DLTensor owns nothing; a DLManagedTensorVersioned is owned by whoever
 * holds the pointer until that holder calls its deleter, exactly once.
 */
#ifndef TORCH_DLPACK_BRIDGE_DLPACK_H_
#define TORCH_DLPACK_BRIDGE_DLPACK_H_

#ifndef DLPACK_DLPACK_H_
/*! \brief The include guard of the reference dlpack.h: an upstream dlpack.h included after this one is skipped. */
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

/*! \brief Major version: a change means the layout of DLManagedTensorVersioned changed. */
#define DLPACK_MAJOR_VERSION 1
/*! \brief Minor version: a change means new enum values or table entries, same layout. */
#define DLPACK_MINOR_VERSION 3

/*! \brief `extern "C"` in C++ (a linkage macro of the reference header, kept for code that uses it). */
#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif
/*! \brief Empty (the reference header's export attribute, kept for code that uses it). */
#define DLPACK_DLL

/*! \brief Flag: the consumer must not write through the data pointer. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
/*! \brief Flag: the producer made a copy; the consumer owns the data alone until it calls the deleter. */
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
/*! \brief Flag: sub-byte elements are padded to a byte each instead of packed. */
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief A DLPack version; consumers compare `major` with DLPACK_MAJOR_VERSION before reading more. */
typedef struct {
  uint32_t major; /*!< layout version */
  uint32_t minor; /*!< additions within a layout */
} DLPackVersion;

/*! \brief Where tensor memory lives. Stored as int32 in DLDevice. */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,          /*!< host memory */
  kDLCUDA = 2,         /*!< CUDA device memory */
  kDLCUDAHost = 3,     /*!< host memory pinned by cudaMallocHost */
  kDLOpenCL = 4,       /*!< OpenCL buffer */
  kDLVulkan = 7,       /*!< Vulkan buffer */
  kDLMetal = 8,        /*!< Metal buffer (Apple GPU) */
  kDLVPI = 9,          /*!< Verilog simulator buffer */
  kDLROCM = 10,        /*!< ROCm device memory */
  kDLROCMHost = 11,    /*!< host memory pinned by hipMallocHost */
  kDLExtDev = 12,      /*!< reserved for extension devices (torch: PrivateUse1) */
  kDLCUDAManaged = 13, /*!< CUDA managed (unified) memory */
  kDLOneAPI = 14,      /*!< oneAPI unified shared memory (torch: XPU) */
  kDLWebGPU = 15,      /*!< WebGPU buffer */
  kDLHexagon = 16,     /*!< Qualcomm Hexagon DSP */
  kDLMAIA = 17,        /*!< Microsoft MAIA */
  kDLTrn = 18,         /*!< AWS Trainium */
  kDLTPU = 19,         /*!< Google TPU (DLPack main after 1.3, no version bump) */
  kDLTPUHost = 20,     /*!< host memory pinned for a TPU (DLPack main after 1.3) */
  kDLAscend = 21,      /*!< Huawei Ascend NPU (DLPack main after 1.3; torch_npu uses kDLExtDev today) */
} DLDeviceType;

/*! \brief A device: its type and its index among devices of that type (0 for host memory). */
typedef struct {
  DLDeviceType device_type; /*!< see DLDeviceType */
  int32_t device_id;        /*!< device index */
} DLDevice;

/*! \brief Type codes of DLDataType::code. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  kDLFloat4_e2m1fn = 17U,
  kDLBcomplex = 18U, /*!< complex of two bfloat16 (DLPack main after 1.3, no version bump) */
} DLDataTypeCode;

/*! \brief Element type: `bits * lanes` bits per element, native byte order. bool is 8 bits. */
typedef struct {
  uint8_t code;   /*!< a DLDataTypeCode */
  uint8_t bits;   /*!< bits per lane */
  uint16_t lanes; /*!< lanes per element (vector types) */
} DLDataType;

/*!
 * \brief A strided n-dimensional view of memory. Owns nothing: `shape` and `strides` belong to whoever
 * filled the struct and live as long as that owner says (see the exchange functions below).
 */
typedef struct {
  void* data;           /*!< base pointer; NULL for a tensor with zero elements */
  DLDevice device;      /*!< where `data` lives */
  int32_t ndim;         /*!< number of dimensions */
  DLDataType dtype;     /*!< element type */
  int64_t* shape;       /*!< ndim sizes; may be NULL when ndim == 0 */
  int64_t* strides;     /*!< ndim strides in elements; non-NULL when ndim > 0 (since 1.2) */
  uint64_t byte_offset; /*!< bytes from `data` to the first element */
} DLTensor;

/*!
 * \brief The pre-1.0 owned tensor, without version or flags (DLPack's legacy "dltensor" capsules).
 * Declared because code written against the reference header (torch's DLConvertor.h among it) uses it.
 */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;  /*!< the tensor */
  void* manager_ctx;   /*!< producer's private context */
  void (*deleter)(struct DLManagedTensor* self); /*!< releases everything; may be NULL */
} DLManagedTensor;

/*!
 * \brief An owned tensor. The holder of the pointer owns it until it calls `deleter(self)`, which frees
 * `manager_ctx`, the struct itself and the producer's hold on the data. Fields up to `flags` stay at these
 * offsets in every major version, so a consumer that sees another major version can still call `deleter`.
 */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version; /*!< layout of this struct */
  void* manager_ctx;     /*!< producer's private context */
  void (*deleter)(struct DLManagedTensorVersioned* self); /*!< releases everything; may be NULL */
  uint64_t flags;       /*!< DLPACK_FLAG_BITMASK_* */
  DLTensor dl_tensor;   /*!< the tensor; shape and strides live until `deleter` runs */
} DLManagedTensorVersioned;

/*!
 * \brief Allocate a new tensor through the producer. Only prototype's dtype, ndim, shape and device are read.
 * \param out receives an owned tensor on success.
 * \param SetError called exactly once, iff the function fails, with an error kind ("MemoryError",
 *        "ValueError", ...) and a message. It may set a Python error, so the caller arranges the GIL for it.
 * \return 0 on success, -1 on failure.
 */
typedef int (*DLPackManagedTensorAllocator)(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                                            void (*SetError)(void* error_ctx, const char* kind,
                                                             const char* message));

/*!
 * \brief Export a Python tensor as an owned tensor, without stream synchronization. GIL held.
 * \param out receives the owned tensor; the caller must call its deleter exactly once.
 * \return 0, or -1 with a Python exception set (BufferError when DLPack cannot describe the data).
 */
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void* py_object, DLManagedTensorVersioned** out);

/*!
 * \brief Import an owned tensor as a Python tensor, without copying or synchronizing. GIL held.
 * Takes ownership of `tensor` whatever the outcome: on failure its deleter has been called.
 * \param out_py_object receives a new reference.
 * \return 0, or -1 with a Python exception set.
 */
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned* tensor, void** out_py_object);

/*!
 * \brief Describe a Python tensor in a caller-provided DLTensor, without allocating or synchronizing.
 * GIL held. The shape, strides and data stay valid only until control returns to the object's owner
 * (typically: for the duration of the call that received `py_object`).
 * \return 0, or -1 with a Python exception set.
 */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void* py_object, DLTensor* out);

/*!
 * \brief The producer's current work stream for a device (e.g. torch.cuda.current_stream), NULL for CPU.
 * \param out_current_stream receives the raw stream handle (cudaStream_t, hipStream_t, ...); not owned.
 * \return 0, or -1 with a Python exception set.
 */
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id, void** out_current_stream);

/*! \brief Header common to every version of the exchange table. */
typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;                    /*!< the table's version; check `major` first */
  struct DLPackExchangeAPIHeader* prev_api; /*!< an older-major table, or NULL */
} DLPackExchangeAPIHeader;

/*!
 * \brief A producer's function table, published on its tensor type as `__dlpack_c_exchange_api__`
 * (PyCapsule named "dlpack_exchange_api") and, in DLPack 1.2, as `__c_dlpack_exchange_api__` (int).
 * The table lives as long as the process. Only `dltensor_from_py_object_no_sync` may be NULL.
 */
typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;  /*!< version and older-major table: read before anything else */
  /*! \brief Allocates a new tensor like a prototype DLTensor, owned by the caller (DLPackManagedTensorAllocator). */
  DLPackManagedTensorAllocator managed_tensor_allocator;
  /*! \brief Exports a Python tensor as an owning DLManagedTensorVersioned (DLPackManagedTensorFromPyObjectNoSync). */
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  /*! \brief Imports an owning tensor as the producer's Python tensor (DLPackManagedTensorToPyObjectNoSync). */
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  /*! \brief Fills a non-owning DLTensor from a Python tensor, or NULL (DLPackDLTensorFromPyObjectNoSync). */
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
  /*! \brief The producer's current stream on a device (DLPackCurrentWorkStream). */
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // DLPACK_DLPACK_H_

#if DLPACK_MAJOR_VERSION != 1 || DLPACK_MINOR_VERSION < 2
#error "an upstream dlpack.h older than 1.2 was included first; torch_dlpack_bridge needs the 1.2+ exchange table"
#endif

/*! \brief Name of the PyCapsule holding a DLPackExchangeAPI* (DLPack 1.3). */
#define TDB_EXCHANGE_API_CAPSULE_NAME "dlpack_exchange_api"

/*!
 * \brief This project's addition on torch.Tensor (not DLPack): the attribute holding a PyCapsule of
 * `int (*)(PyObject*)`, which answers requires_grad where torch's getter needs no Python (1 or 0), else -1
 * (autograd.h).
 */
#define TDB_AUTOGRAD_PROBE_ATTR "__tdb_autograd_probe__"
/*! \brief The name of the PyCapsule held by TDB_AUTOGRAD_PROBE_ATTR. */
#define TDB_AUTOGRAD_PROBE_CAPSULE_NAME "torch_dlpack_bridge.autograd_probe"
/*!
 * \brief This project's addition on torch.Tensor (not DLPack): the attribute holding a PyCapsule of
 * `int (*)(PyObject*)`, which bumps a tensor's version counter as torch's in-place operations do (0), or returns
 * -1 where it cannot without Python (autograd.h: a written parameter's commit).
 */
#define TDB_VERSION_BUMP_ATTR "__tdb_version_bump__"
/*! \brief The name of the PyCapsule held by TDB_VERSION_BUMP_ATTR. */
#define TDB_VERSION_BUMP_CAPSULE_NAME "torch_dlpack_bridge.version_bump"

/*!
 * \brief This project's addition (not DLPack): where the fields a written parameter reads and writes lie in a
 * torch.Tensor or nn.Parameter object of exactly these types, so that a consumer header reads requires_grad's
 * common answer and bumps the version counter inline, without a call (autograd.h). The table library fills it
 * for the torch it was built against and checks it on tensors of its own before publishing it.
 */
typedef struct TDBAutogradLayout {
  /*! \brief The types whose objects this layout describes (torch.Tensor, torch.nn.Parameter; either may be NULL). */
  const void* types[2];
  /*! \brief The TensorImpl pointer lies at (char*)object + impl_offset. */
  int64_t impl_offset;
  /*! \brief The autograd meta pointer lies at (char*)impl + autograd_meta_offset: NULL means no requires_grad. */
  int64_t autograd_meta_offset;
  /*! \brief The version counter pointer lies at (char*)impl + version_counter_offset: NULL, no counter (inference). */
  int64_t version_counter_offset;
  /*! \brief The version, a 32-bit atomic, lies at (char*)counter + version_offset. */
  int64_t version_offset;
} TDBAutogradLayout;
/*! \brief The attribute on torch.Tensor holding a PyCapsule of a `const TDBAutogradLayout*` (absent: none checked). */
#define TDB_AUTOGRAD_LAYOUT_ATTR "__tdb_autograd_layout__"
/*! \brief The name of the PyCapsule held by TDB_AUTOGRAD_LAYOUT_ATTR. */
#define TDB_AUTOGRAD_LAYOUT_CAPSULE_NAME "torch_dlpack_bridge.autograd_layout"

#if defined(__cplusplus) && __cplusplus >= 201103L
static_assert(sizeof(DLDevice) == 8, "DLDevice layout");
static_assert(sizeof(DLDataType) == 4, "DLDataType layout");
static_assert(sizeof(void*) != 8 || sizeof(DLTensor) == 48, "DLTensor layout");
static_assert(sizeof(void*) != 8 || sizeof(DLManagedTensorVersioned) == 80, "DLManagedTensorVersioned layout");
static_assert(sizeof(void*) != 8 || sizeof(DLPackExchangeAPI) == 56, "DLPackExchangeAPI layout");
#endif

#endif  // TORCH_DLPACK_BRIDGE_DLPACK_H_
