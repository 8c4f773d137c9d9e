/*!
 * \file torch_dlpack_bridge/config.h
 * \brief The attribute macros the other headers share, defined once: TDB_HOST_DEVICE for the accessors
 *        that device code uses, and the internal ones (module-local statics, inlining) that kernels do not need.
 *
 * Included by every header that uses one of them; a kernel author never includes it directly.
 */
#ifndef TORCH_DLPACK_BRIDGE_CONFIG_H_
#define TORCH_DLPACK_BRIDGE_CONFIG_H_

/*! \brief `__host__ __device__` when compiled by nvcc or hipcc (accessors usable in kernels), empty otherwise. */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define TDB_HOST_DEVICE __host__ __device__
#else
#define TDB_HOST_DEVICE
#endif

/*! \cond INTERNAL */
// Attribute macros for the headers' own definitions (hidden from the reference: not for kernel code).
// TDB_MODULE_LOCAL gives a function hidden visibility, so that its function-local statics belong to the shared
// object that includes the header. Without it (a module built without -fvisibility=hidden, e.g. with
// setuptools' default flags) GCC emits such a static as one "unique" symbol that the dynamic linker merges
// across every extension module of the process, even those loaded RTLD_LOCAL.
#if defined(__GNUC__) || defined(__clang__)
#define TDB_MODULE_LOCAL __attribute__((visibility("hidden")))
#else
#define TDB_MODULE_LOCAL
#endif

// TDB_ALWAYS_INLINE: for the view's constructors, which run once per tensor argument; compilers keep them out
// of line for their throw paths, and the call then costs about as much as the checks it makes.
#if defined(__GNUC__) || defined(__clang__)
#define TDB_ALWAYS_INLINE __attribute__((always_inline))
#else
#define TDB_ALWAYS_INLINE
#endif

// TDB_NOINLINE keeps the error path (string building) out of the callers of the checks.
#if defined(__GNUC__) || defined(__clang__)
#define TDB_NOINLINE __attribute__((noinline))
#else
#define TDB_NOINLINE
#endif
/*! \endcond */

#endif  // TORCH_DLPACK_BRIDGE_CONFIG_H_
