"""Soak: every table function N times from C; resident memory must grow by less than 1 MB and allocation
counts must balance. `python scripts/soak.py` runs 10**6 calls each; tests/test_soak.py a shorter run.

Allocation balance is read from the tdbdev test backend's counting allocator (tests/privateuse1_backend),
so the allocator and import paths are soaked on a device-generic path too."""

import argparse
import os
import sys

import torch

import torch_dlpack_bridge
from torch_dlpack_bridge import _probe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

LIMIT_BYTES = 1 << 20


def torch_at_least(major: int, minor: int) -> bool:
    """The running torch is major.minor or newer (compared as a pair)."""
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (major, minor)


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def soak(iterations: int) -> list:
    """Returns (name, rss growth in bytes, live-allocation delta, allocations made) per workload."""
    from privateuse1_backend import load

    backend = load()
    api = torch_dlpack_bridge.exchange_api()
    cpu = torch.arange(24.0).reshape(2, 3, 4).transpose(0, 2)
    dev = torch.empty(2, 3, 4, device="tdbdev:1")
    workloads = [
        ("dltensor", "dltensor", cpu),
        ("export + delete", "managed", cpu),
        ("export + import + drop", "to_python", cpu),
        ("allocate + delete (cpu)", "allocate", cpu),
        ("allocate + delete (tdbdev:1)", "allocate", dev),
        ("export + import + drop (tdbdev:1)", "to_python", dev),
        # a tdbdev stream has a raw handle from torch 2.11 on (c10::Stream::native_handle); before, the table
        # raises for it (by design), so the stream path is soaked on the CPU there
        ("current_work_stream (tdbdev:1)", "stream", (12, 1)) if torch_at_least(2, 11)
        else ("current_work_stream (cpu)", "stream", (1, 0)),
    ]
    results = []
    for name, which, obj in workloads:
        chunk = min(iterations, 10000)  # to_python keeps one chunk of exports in flight
        _probe.time(api, which, obj, chunk, 1)  # warm up caches and allocator pools
        rss, live, total = resident_bytes(), backend.live_allocations(), backend.total_allocations()
        _probe.time(api, which, obj, chunk, max(1, iterations // chunk - 1))
        results.append((name, resident_bytes() - rss, backend.live_allocations() - live,
                        backend.total_allocations() - total))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=10**6)
    args = parser.parse_args()
    failed = False
    for name, growth, live, made in soak(args.iterations):
        ok = growth < LIMIT_BYTES and live == 0
        failed |= not ok
        print(f"[{'ok' if ok else 'FAIL'}] {name:36} {args.iterations} calls: rss {growth / 1024:+.0f} KiB, "
              f"live allocations {live:+d} (tdbdev allocations made: {made})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
