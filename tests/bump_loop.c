/* A consumer's worker loop over a published version bump (the C function in torch.Tensor.__tdb_version_bump__),
 * for tests/test_threads.py: plain C with no Python API, called through ctypes, which releases the GIL for the
 * call, so that several threads bump at once as a consumer's kernels would. */

#include <sched.h>

typedef int (*bump_fn)(void* obj);

/* Waits until `threads` callers have arrived at `gate` (so that they bump at once, not one after the other), then
 * calls bump(obj) `times` times. Returns how many calls did not return 0 (an object the bump does not know). */
long bump_many(bump_fn bump, void* obj, long times, int* gate, int threads) {
  long failed = 0;
  __atomic_add_fetch(gate, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(gate, __ATOMIC_SEQ_CST) < threads) sched_yield();
  for (long i = 0; i < times; ++i) failed += bump(obj) != 0;
  return failed;
}
