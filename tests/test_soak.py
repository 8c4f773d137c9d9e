"""A short soak (CI); scripts/soak.py runs 10**6 calls of each function."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))

import soak  # noqa: E402


def test_short_soak_keeps_memory_flat_and_allocations_balanced():
    iterations = int(os.environ.get("TDB_SOAK_ITERATIONS", "100000"))
    results = soak.soak(iterations)
    assert len(results) == 7
    made = {name: count for name, _, _, count in results}
    assert made["allocate + delete (tdbdev:1)"] >= iterations  # they really went through the backend
    for name, growth, live, _ in results:
        assert growth < soak.LIMIT_BYTES, f"{name}: resident memory grew by {growth} bytes"
        assert live == 0, f"{name}: {live} allocations left live"
