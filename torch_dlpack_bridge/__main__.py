"""``python -m torch_dlpack_bridge``: status (which table consumers get, and why), a self-check of every table
function (on CPU, then on every device torch reports: _self_check), a quick timing with the machine's load
beside it, and one verdict line last.

The verdict, and the exit status with it. It says what a new process of the same environment gets at
``import torch``, not only this one, is wrapped at 100 columns and ends with a ``next:`` step:

- ``verdict: works: ...``, status 0: every check passed or did not apply (``[n/a]``: torch cannot do it on
  that device either); it names the table kernel libraries get from ``torch.Tensor`` in every process; next,
  the first-kernel page for a kernel author, the docs for anyone else.
- ``verdict: works where imported: ...``, status 0: the checks passed, but with
  ``TORCH_DLPACK_BRIDGE_AUTOLOAD=0`` (or no autoload hook installed) a new ``import torch`` keeps torch's own
  table (or none); processes that ``import torch_dlpack_bridge`` get this one.
- ``verdict: works in this process only: ...``, status 0: the checks passed, but the cache cannot be used, so
  this process built the table privately and a new ``import torch`` keeps torch's own table (or, on a torch
  without one, builds it again in every process); next, the cache to set.
- ``verdict: FAILED: N checks ([FAIL] above: ...); next: ...``, status 1: a check failed; next, report the
  output (and, where torch has a table of its own, ``TORCH_DLPACK_BRIDGE_PREFER=torch`` uses it meanwhile).
- ``verdict: FAILED: TORCH_DLPACK_BRIDGE_<NAME>=<value> ...; next: ...``, status 1, checked first: a variable
  of this package set to a value it does not take; the values it takes.
- ``verdict: FAILED: the table library could not be loaded; next: ...``, status 1: the reason and its fix are
  on stderr just before it.
- ``verdict: FAILED: <error> (traceback above); next: ...``, status 1: an unexpected error of this package.
- ``verdict: torch's own DLPack exchange table is in use: ...; next: ...``, status 0, the only output: torch is
  a minor newer than the wheel covers; nothing is built (_loader.NewerTorch).
- status 2, no verdict: a command line argparse refuses.
- status 1, no verdict: the reader of the output went away (``python -m torch_dlpack_bridge | head -1``);
  nothing is printed after that, on stderr either.

``python -m torch_dlpack_bridge --includes`` prints the compiler flag for the consumer headers;
``python -m torch_dlpack_bridge bench`` runs a short version of the benchmark suite (benchmarks/);
``python -m torch_dlpack_bridge check [TARGET]`` runs the conformance cases on a DLPack exchange table (check/);
``python -m torch_dlpack_bridge build`` builds the table library for the running torch into the cache, trying
again after a failed build. Run this way, the package's import leaves loading the table to main() (see
_loader.left_to_main), which loads it once it has read its arguments.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import sys
import textwrap
import timeit
import traceback
from typing import Dict, List, Optional, Sequence

import torch

import torch_dlpack_bridge as bridge
from torch_dlpack_bridge import _loader, _probe, _self_check, _table

CPU = (1, 0)
AUTOLOAD_ENV = "TORCH_DLPACK_BRIDGE_AUTOLOAD"
"""Read by the autoload hook (autoload/): ``0`` leaves publishing to ``import torch_dlpack_bridge``."""


def status() -> None:
    info = bridge.build_info()
    origin = {"shipped": "installed with the package", "cache": "built at an earlier import",
              "build": "built by this import",
              "private": "built by this import into a temporary folder (the cache could not be used)"}[info["origin"]]
    python = "" if info["python_abi"] == "gil" else f"free-threaded {info['python_abi']}, "
    print(f"torch {torch.__version__}; torch_dlpack_bridge {bridge.__version__}, table library {origin}, built "
          f"against torch {info['torch_version']} (C++11 ABI {info['cxx11_abi']}, {python}gcc {info['compiler']}, "
          f"DLPack {info['dlpack_version'][0]}.{info['dlpack_version'][1]})\n  {info['library']}")
    has_native = bridge._native_capsule() is not None
    print("\n".join(table_lines(bridge.active_provider(), has_native)))
    print(at_import_torch(info["origin"], has_native))


def at_import_torch(origin: str, has_native: bool) -> str:
    """One line: what the autoload hook does at `import torch` in a new process, and what to run if anything."""
    if os.environ.get(AUTOLOAD_ENV, "1") == "0":
        return f"at `import torch`: nothing ({AUTOLOAD_ENV}=0); `import torch_dlpack_bridge` publishes"
    if origin in ("shipped", "cache", "build"):
        where = "installed with the package" if origin == "shipped" else "in the cache"
        return f"at `import torch`: the hook does the same in every process (this project's library is {where})"
    if has_native:
        return ("at `import torch`: the hook keeps torch's own table (the cache cannot be used, and a build for "
                f"each process would cost more than it saves); set {_loader.CACHE_ENV} to a folder of yours, "
                f"then run `{_loader.BUILD_COMMAND}`")
    return (f"at `import torch`: the hook builds this table for every process (the cache cannot be used); set "
            f"{_loader.CACHE_ENV} to a folder of yours")


def build() -> int:
    """`build`: the package's import has loaded, or built (retrying a recorded failure), the library."""
    info = bridge.build_info()
    if info["origin"] == "private":
        print(f"built for this process only: the cache cannot be used (see the line above); set "
              f"{_loader.CACHE_ENV} to a folder of yours", file=sys.stderr)
        return 1
    did = {"build": "built", "cache": "already built", "shipped": "installed with the package"}[info["origin"]]
    print(f"the exchange table library for torch {torch.__version__}: {did}, {info['library']}; "
          f"`import torch` publishes it")
    return 0


TABLES = {"torch_dlpack_bridge": "this project's table", "torch": "torch's own table",
          "other": "another library's table", None: "no table"}


def consumers_get(providers: Dict[str, Optional[str]]) -> str:
    """What a consumer that looks on torch.Tensor gets: one table's name, or each name's table when they differ."""
    if len(set(providers.values())) == 1:
        return TABLES[next(iter(providers.values()))]
    return ", ".join(f"{TABLES[provider]} under {name}" for name, provider in providers.items())


def table_lines(providers: Dict[str, Optional[str]], has_native: bool) -> List[str]:
    """Which table consumers get (what torch.Tensor's two names lead to), why, and how to switch."""
    names = " and ".join(providers)
    lines = [f"consumers get {consumers_get(providers)} (torch.Tensor.{names})"]
    use_ours = f"to use this project's: {bridge.PREFER_ENV}=bridge or torch_dlpack_bridge.install()"
    torch_minor = ".".join(torch.__version__.split(".")[:2])
    if set(providers.values()) == {"torch_dlpack_bridge"} and has_native:
        lines += [f"  why: torch {torch_minor} has a table of its own, and this project's replaces it by default: "
                  f"faster (the quick timing below), and it refuses the conj and neg views torch's exports as if plain",
                  f"  to keep torch's own: {bridge.PREFER_ENV}=torch or torch_dlpack_bridge.install(prefer='torch')"]
    elif set(providers.values()) == {"torch_dlpack_bridge"}:
        lines.append(f"  why: torch {torch_minor} has no table of its own")
    elif set(providers.values()) == {"torch"}:
        lines += [f"  why: {bridge.PREFER_ENV}=torch (or install(prefer='torch')) keeps torch's own", f"  {use_ours}"]
    else:
        lines += ["  why: something other than this package set them after it (another library, or uninstall())",
                  f"  {use_ours}"]
    return lines


def load_average() -> str:
    try:
        return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:  # the system does not say
        return "unknown"


def ratio_cell(per_round: Sequence[float]) -> str:
    """The ratio column: the median of the rounds' ratios and their range; "noise" when the rounds disagree on
    which table is faster (the range spans 1.00), so the median says nothing about this machine now."""
    low, high = min(per_round), max(per_round)
    return f"{statistics.median(per_round):.2f} ({low:.2f}-{high:.2f})" + (" noise" if low < 1.0 < high else "")


def quick_timing() -> None:
    """ns per call, timed from C by the probe, for this table and torch's own, in alternating rounds so that
    their ratio sees the same machine; t.__dlpack__() from Python. The numbers are this machine's, now: the
    load average and the CPU count are printed beside them (a busy machine shows several times more ns)."""
    t = torch.empty(8, 16, 32)
    tables = [("torch_dlpack_bridge", bridge.exchange_api())]
    if bridge._native_capsule() is not None:
        tables.append(("torch native", bridge._native_capsule()))
    rows = [("dltensor_from_py_object_no_sync", "dltensor", t), ("managed export + deleter", "managed", t),
            ("import (to_py) + drop", "to_python", t), ("allocator + deleter", "allocate", t),
            ("current_work_stream(CPU)", "stream", CPU)]
    cpus = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    print(f"measured on this machine now: {cpus} CPUs ({usable} usable to this process), load average "
          f"{load_average()} (1, 5, 15 min) at the start")
    ratio = len(tables) == 2
    print(f"{'ns per call (best round)':34}" + "".join(f"{name:>22}" for name, _ in tables)
          + (f"  {'ours / torch (range)'}" if ratio else ""))
    for label, which, obj in rows:
        rounds = [[_probe.time(capsule, which, obj, 20000, 3) for _, capsule in tables] for _ in range(3)]
        cells = [min(column) for column in zip(*rounds)]
        print(f"{label:34}" + "".join(f"{ns:22.1f}" for ns in cells)
              + (f"  {ratio_cell([a / b for a, b in rounds])}" if ratio else ""))
    n = 20000
    python_ns = min(timeit.repeat(t.__dlpack__, number=n, repeat=5)) / n * 1e9
    print(f"{'t.__dlpack__() from Python':34}{python_ns:22.1f}")
    print(f"load average at the end {load_average()} on {usable} usable CPUs. Absolute ns move with the load "
          f"(several times on a busy machine){'; the ratio far less: the median of 3 rounds, its range over them, and noise where the rounds disagree on which table is faster' if ratio else ''}.\n"
          f"`python -m torch_dlpack_bridge bench` and benchmarks/RESULTS.md measure at length.")


def project_url(label: str, fallback: str) -> str:
    """The address under `label` ("Issues", "Documentation") in the installed distribution's metadata."""
    try:
        urls = importlib.metadata.metadata("torch_dlpack_bridge").get_all("Project-URL") or []
    except importlib.metadata.PackageNotFoundError:  # the checkout on sys.path, never installed
        urls = []
    return next((url.split(", ", 1)[1] for url in urls if url.startswith(f"{label}, ")), fallback)


def issues_page() -> str:
    """Where to report a failure."""
    return project_url("Issues", "the project's issue tracker")


def read_next() -> str:
    """The `next:` of a verdict that works: the first-kernel page for a kernel author, the docs for the rest."""
    docs = project_url("Documentation", "")
    if not docs:
        return "next: to write a kernel, the first-kernel page of the docs (docs/guides/first-kernel.md); else the docs"
    return f"next: to write a kernel, {docs.rstrip('/')}/guides/first-kernel.html; anything else, {docs}"


ENV_VALUES = {
    _table.PREFER_ENV: ("torch or bridge (the default)", lambda v: v in ("torch", "bridge")),
    AUTOLOAD_ENV: ("0 (off) or 1 (the default)", lambda v: v in ("0", "1")),
    _loader.BUILD_ENV: ("0 (no build at import) or 1 (the default)", lambda v: v in ("0", "1")),
    _loader.CACHE_ENV: ("an absolute path", os.path.isabs),
    _loader.TIMEOUT_ENV: ("a number of seconds above 0", lambda v: _seconds(v) > 0),
}
"""Every TORCH_DLPACK_BRIDGE_* variable the package reads: the values it takes, and the test of one. Empty is
unset. The hook and the loader read some others as a default (AUTOLOAD=off is on), so the main job says so."""


def _seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return -1.0


def environment_verdict() -> Optional[str]:
    """The failing verdict where variables of this package are set to values it does not take, naming each and
    the values it takes; None where all are fine."""
    bad = [(name, takes) for name, (takes, ok) in ENV_VALUES.items()
           if os.environ.get(name) and not ok(os.environ[name])]
    if not bad:
        return None
    values = " and ".join(f"{name}={os.environ[name]!r}" for name, _ in bad)
    fixes = ", ".join(f"{name} to {takes}" for name, takes in bad)
    return (f"verdict: FAILED: {values} {'is not a value' if len(bad) == 1 else 'are not values'} this package "
            f"takes; next: set {fixes}, or unset {'it' if len(bad) == 1 else 'them'}, then run `python -m "
            f"torch_dlpack_bridge` again")


def fresh_import(origin: str, has_native: bool) -> Optional[str]:
    """Where a new process of this environment gets another table at `import torch` than this one's, or gets it
    at a cost: what it gets, and why; None where it gets this process's table as this process got it."""
    theirs = "torch's own table" if has_native else "no table"
    if os.environ.get(AUTOLOAD_ENV, "1") == "0":
        return f"a new `import torch` keeps {theirs} ({AUTOLOAD_ENV}=0)"
    if _table.HOOK_MODULE not in sys.modules:  # its .pth line runs at start-up wherever it is installed
        return f"a new `import torch` keeps {theirs} (the autoload hook is not installed in this environment)"
    if origin == "private":
        why = "the cache cannot be used (the line on `import torch` above)"
        if has_native:
            return f"a new `import torch` keeps torch's own table: {why}"
        return f"a new `import torch` builds the table again, 20-60 s in each process: {why}"
    return None


def verdict(failed: Sequence[str], consumers: str, has_native: bool, origin: str = "shipped") -> str:
    """The last line: it works, and what that means for a new process of this environment; or what failed,
    and what to do next."""
    if failed:
        meanwhile = f"set {bridge.PREFER_ENV}=torch to use torch's own table meanwhile, and " if has_native else ""
        return (f"verdict: FAILED: {len(failed)} check{'s' if len(failed) > 1 else ''} ([FAIL] above: "
                f"{', '.join(failed)}); next: {meanwhile}report this output at {issues_page()}")
    checks = ("every check of this project's table passed ([n/a]: torch cannot do it there either); kernel "
              f"libraries (tvm-ffi, kernels on this project's headers) get {consumers} from torch.Tensor")
    elsewhere = fresh_import(origin, has_native)
    if elsewhere is None or (consumers == "torch's own table" and origin != "private"):  # a new process: the same
        return f"verdict: works: {checks} in every process of this environment; {read_next()}"
    if origin != "private":
        return (f"verdict: works where imported: {checks} in processes that `import torch_dlpack_bridge`, but "
                f"{elsewhere}; {read_next()}")
    return (f"verdict: works in this process only: {checks} here, but {elsewhere}; next: set "
            f"{_loader.CACHE_ENV} to a folder of yours, then run `{_loader.BUILD_COMMAND}`")


def say(verdict_line: str) -> None:
    """Prints a verdict wrapped at 100 columns, its continuation lines indented; a name, an address or a
    `command` stays whole on its line."""
    parts = verdict_line.split("`")
    glued = "`".join(part.replace(" ", "\0") if i % 2 else part for i, part in enumerate(parts))
    print(textwrap.fill(glued, 100, subsequent_indent="  ", break_long_words=False,
                        break_on_hyphens=False).replace("\0", " "))


def parser() -> argparse.ArgumentParser:
    """The command line: options of the status run, and one subparser per subcommand (`dest="command"`;
    `bench` passes what follows it to the benchmark's own parser)."""
    top = argparse.ArgumentParser(prog="python -m torch_dlpack_bridge",
                                  description="Status, a self-check of every table function, a quick timing, and a "
                                              "verdict last (exit status 0: it works; 1: what failed, and what to "
                                              "do next); or one of the subcommands.")
    top.add_argument("--includes", action="store_true", help="print the -I flag for the consumer headers")
    top.add_argument("--cmake-dir", action="store_true",
                     help="print the directory of torch_dlpack_bridgeConfig.cmake (for find_package)")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", title="subcommands")
    commands.add_parser("build", help="build the table library for this torch into the cache (again, after a "
                                      "failed build)",
                        description="Builds the table library for the running torch into the cache, trying again "
                                    "after a failed build; later processes load it from there.")
    commands.add_parser("bench", add_help=False, prefix_chars="\0",  # every argument goes to _bench.main
                        help="a short run of the benchmark suite (`bench --help`; benchmarks/run.py runs the full "
                             "one)").add_argument("args", nargs="*")
    commands.add_parser("check", add_help=False, prefix_chars="\0",  # every argument goes to check.main
                        help="conformance cases for a DLPack exchange table: this project's (default), torch's own, "
                             "paddle, cuda.core, ... (`check --help`)").add_argument("args", nargs="*")
    return top


def main(argv: List[str]) -> int:
    args = parser().parse_args(argv)
    if args.includes:
        print(f"-I{bridge.get_include()}")
        return 0
    if args.cmake_dir:
        print(bridge.get_cmake_dir())
        return 0
    if args.command == "check":  # the cases run in their own interpreters, each publishing what it checks
        from torch_dlpack_bridge import check

        return check.main(args.args)
    _loader.left_to_main = False
    bad_environment = environment_verdict()
    if bad_environment is not None:  # before anything reads them: the package would raise, or misread, each
        if args.command is None:
            say(bad_environment)
        else:
            print(bad_environment.replace("verdict: FAILED: ", "torch_dlpack_bridge: ", 1), file=sys.stderr)
        return 1
    try:
        _table.publish_at_import(explicit=True, retry_failed=args.command == "build", keep_newer=args.command is None)
    except _loader.NewerTorch as kept:  # not a failure: torch's own table serves; the line says the ways out
        say(f"verdict: {kept}")
        return 0
    except ImportError as error:
        print(error, file=sys.stderr)
        if args.command is None:
            say("verdict: FAILED: the table library could not be loaded; next: the message above says why and what "
                "to do, then run `python -m torch_dlpack_bridge` again")
        return 1
    if args.command == "build":
        return build()
    if args.command == "bench":
        from torch_dlpack_bridge import _bench

        return _bench.main(args.args)
    try:
        status()
        print("\nself-check (this project's table, called from C; no kernel is launched):")
        lines, failed = _self_check.report(bridge.exchange_api())
        print("\n".join(lines))
        print("\nquick timing:")
        quick_timing()
    except BrokenPipeError:  # the reader left (`| head`): not a bug, and nothing more can be said
        raise
    except Exception as error:  # a bug of this package: the traceback, then still a verdict
        traceback.print_exc()
        print()
        say(f"verdict: FAILED: {type(error).__name__}: {_self_check.first_line(error)} (traceback above); "
            f"next: report this output at {issues_page()}")
        return 1
    print()
    say(verdict(failed, consumers_get(bridge.active_provider()), bridge._native_capsule() is not None,
                bridge.build_info()["origin"]))
    return 1 if failed else 0


def run(argv: List[str]) -> int:
    """main(), and the exit status; where the reader of stdout left (`| head -1`), as Python's documentation of
    SIGPIPE recommends: stdout pointed at /dev/null (so that the flush at exit raises no second error), status 1."""
    try:
        status = main(argv)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
        return status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
