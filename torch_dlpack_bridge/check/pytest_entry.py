"""The checker's cases as pytest tests, for a framework's own CI. In any test module::

    from torch_dlpack_bridge.check.pytest_entry import conformance_tests

    test_dlpack_exchange_table = conformance_tests("paddle")  # one test per case

The cases run once per module (in their own interpreter, as the command line runs them); a SKIP is a pytest
skip; names in `expected_failures` are expected to FAIL (pytest xfail) and fail the test once they pass, so a
fixed defect is noticed.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable

from .cases import NAMES
from .runner import run


def conformance_tests(target: str, expected_failures: Iterable[str] = (), timeout: float = 600.0) -> Callable:
    """A pytest test function parametrized over the cases, checking `target` (as `check TARGET`)."""
    import pytest

    expected = set(expected_failures)
    unknown = expected - set(NAMES)
    if unknown:
        raise ValueError(f"no such cases: {', '.join(sorted(unknown))}")
    results: Dict[str, Dict[str, str]] = {}

    def result(case: str) -> Dict[str, str]:
        if not results:
            report = run(target, timeout=timeout)
            if report["error"]:
                pytest.fail(f"{target}: {report['error']}")
            results.update({r["case"]: r for r in report["results"]})
        return results[case]

    @pytest.mark.parametrize("case", NAMES)
    def test_dlpack_exchange_table(case: str) -> None:
        r = result(case)
        if r["status"] == "SKIP":
            pytest.skip(r["detail"])
        if case in expected:
            if r["status"] == "PASS":
                pytest.fail(f"{case} passes now: take it out of expected_failures ({r['detail']})")
            pytest.xfail(r["detail"])
        assert r["status"] == "PASS", f"{case}: {r['detail']}"

    return test_dlpack_exchange_table
