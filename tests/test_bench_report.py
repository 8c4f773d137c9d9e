"""The benchmark report's summary (torch_dlpack_bridge._bench.markdown_summary), on planted timings: the page
leads with one row per function and contender, so its ratio and range must be those of the per-tensor rows."""
from torch_dlpack_bridge import _bench

OURS, NATIVE, BACKPORT = _bench.OURS, _bench.NATIVE, _bench.BACKPORT


def test_summary_row_is_the_median_and_range_of_the_per_tensor_ratios():
    res = _bench.Results([OURS, NATIVE, BACKPORT], ["a", "b", "c"], "a")
    # per tensor, ours / native: 0.20, 0.50, 0.30 (two slices each); the backport timed on two tensors only
    for case, ours, native in (("a", [2, 2], [10, 10]), ("b", [5, 5], [10, 10]), ("c", [3, 3], [10, 10])):
        res.ns[("managed", case)] = {OURS: ours, NATIVE: native}
    res.ns[("managed", "a")][BACKPORT] = [4, 4]
    res.ns[("managed", "b")][BACKPORT] = [4, 4]
    res.ns[("stream", "(kDLCPU, 0)")] = {OURS: [1, 1], NATIVE: [4, 4]}
    rows = _bench.markdown_summary(res).splitlines()
    assert rows[0] == "| function | against | ours / it | range over tensors | tensors |"
    assert rows[2:] == ["| managed export + deleter | torch native | 0.30x | 0.20x-0.50x | 3 |",
                        "| managed export + deleter | tvm-ffi backport | 0.88x | 0.50x-1.25x | 2 |",
                        "| current_work_stream(kDLCPU) | torch native | 0.25x | 0.25x | 1 |"]
