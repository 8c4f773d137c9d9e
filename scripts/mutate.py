"""Mutation testing: plants each one-line bug of scripts/mutants.toml, rebuilds what it must, runs the test files
the mutant names (`pytest -x -q`) and counts it killed (a test failed, or the run timed out) or survived; the
tree is restored after each mutant, also on Ctrl-C or a crash (a journal in build/mutate/ is replayed on the
next start). A full run writes its table to scripts/mutation.md (docs/development.md includes it).

    python scripts/mutate.py                 # the whole catalogue, with a baseline run of the tests first
    python scripts/mutate.py --check         # only: does every snippet still match its file exactly once?
    python scripts/mutate.py --only import-empty-negative-stride --no-baseline
    python scripts/mutate.py --file _cache.py
    python scripts/mutate.py --file _build.py --merge-report   # a subset, merged into scripts/mutation.md

A mutant is a file, an exact snippet of it and its replacement (no line numbers, so edits elsewhere in the file
leave it valid). A snippet that no longer occurs exactly once is "stale": reported and counted against the
score, never skipped. A mutant that cannot change behaviour carries `equivalent = "why"` and is not run.

Rebuilds: csrc/ changes recompile the sources that include the file (objects of the unmutated sources are
cached in build/mutate/, keyed by the sources' digest and the flags) and relink the table library in
torch_dlpack_bridge/_lib/; autoload/ changes are copied over the hook installed in site-packages; the consumer
headers and the Python package need nothing (the tests compile their modules per session; no bytecode is
written while a mutant is in place). Needs the package installed editable (`pip install --no-build-isolation
-e .`), run from the checkout with its venv active.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATALOGUE = os.path.join(REPO, "scripts", "mutants.toml")
REPORT = os.path.join(REPO, "scripts", "mutation.md")
WORK = os.path.join(REPO, "build", "mutate")
JOURNAL = os.path.join(WORK, "journal.json")
AUTOLOAD_FILES = ("_torch_dlpack_bridge_autoload.py", "torch_dlpack_bridge_autoload.pth",
                  "torch_dlpack_bridge_autoload.start")
STATUSES = ("killed", "survived", "stale", "equivalent", "not run")


@dataclasses.dataclass
class Mutant:
    id: str
    file: str  # relative to the repository
    original: str
    replacement: str
    tests: List[str]
    equivalent: Optional[str] = None  # why it cannot change behaviour: then it is not run
    status: str = ""
    detail: str = ""  # the killing test, or why stale
    seconds: float = 0.0
    run: str = ""  # the run that gave the result: "`commit`, date" (earlier runs, with --merge-report)


def load_catalogue(path: str) -> List[Mutant]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(path, "rb") as f:
        entries = tomllib.load(f).get("mutant", [])
    mutants, seen = [], set()
    for entry in entries:
        unknown = set(entry) - {f.name for f in dataclasses.fields(Mutant)}
        missing = {"id", "file", "original", "replacement", "tests"} - set(entry)
        if unknown or missing or entry.get("id") in seen:
            raise SystemExit(f"{path}: mutant {entry.get('id')!r}: unknown keys {sorted(unknown)}, missing "
                             f"{sorted(missing)}, or a duplicate id")
        seen.add(entry["id"])
        mutants.append(Mutant(**entry))
    return mutants


def stale_reason(m: Mutant) -> Optional[str]:
    """Why `m` cannot be applied to the tree as it is now, or None."""
    path = os.path.join(REPO, m.file)
    if not os.path.isfile(path):
        return f"{m.file} does not exist"
    missing = [t for t in m.tests if not os.path.exists(os.path.join(REPO, t.split("::")[0]))]
    if missing:
        return f"test file {', '.join(missing)} does not exist"
    with open(path, encoding="utf-8") as f:
        count = f.read().count(m.original)
    if count != 1:
        return "the snippet is not in the file" if count == 0 else f"the snippet occurs {count} times"
    return None


# ---- the tree: files written, and put back whatever happens ---------------------------------------------

def write_atomically(path: str, data: bytes, mode: Optional[int] = None) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".mutate-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode if mode is not None else stat_mode(path))
    os.replace(tmp, path)


def stat_mode(path: str) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return 0o644


def forget_bytecode(path: str) -> None:
    """A .pyc written from the mutant could outlive it (same size, same second): remove the file's pycs."""
    if path.endswith(".py"):
        stem = os.path.splitext(os.path.basename(path))[0]
        for pyc in glob.glob(os.path.join(os.path.dirname(path), "__pycache__", stem + ".*.pyc")):
            os.remove(pyc)


class Tree:
    """Files changed for one mutant, each saved first in build/mutate/saved/ and listed in the journal, so
    that restore() (or the next start, after a kill -9) puts every byte back."""

    def __init__(self):
        os.makedirs(os.path.join(WORK, "saved"), exist_ok=True)
        self.saved: Dict[str, Optional[str]] = {}  # path -> saved copy (None: the file did not exist)

    def change(self, path: str, data: bytes, mode: Optional[int] = None) -> None:
        if path not in self.saved:
            copy = None
            if os.path.exists(path):
                copy = os.path.join(WORK, "saved", f"{len(self.saved)}-{os.path.basename(path)}")
                shutil.copy2(path, copy)
            self.saved[path] = copy
            with open(JOURNAL + ".tmp", "w") as f:
                json.dump(self.saved, f)
            os.replace(JOURNAL + ".tmp", JOURNAL)
        write_atomically(path, data, mode)
        forget_bytecode(path)

    def restore(self) -> None:
        for path, copy in self.saved.items():
            if copy is None:
                if os.path.exists(path):
                    os.remove(path)
            else:
                with open(copy, "rb") as f:
                    write_atomically(path, f.read(), stat_mode(copy))
                os.remove(copy)
            forget_bytecode(path)
        self.saved = {}
        if os.path.exists(JOURNAL):
            os.remove(JOURNAL)

    @classmethod
    def recover(cls) -> None:
        """Replays a journal left by a run that was killed before it could restore the tree."""
        if os.path.exists(JOURNAL):
            tree = cls()
            with open(JOURNAL) as f:
                tree.saved = json.load(f)
            print(f"mutate: restoring {len(tree.saved)} file(s) left changed by an interrupted run: "
                  f"{', '.join(os.path.relpath(p, REPO) for p in tree.saved)}", flush=True)
            tree.restore()


# ---- the table library: objects cached, a mutant's sources recompiled and relinked ----------------------

class TableLibrary:
    """The table library the package loads (torch_dlpack_bridge/_lib/), built from cached objects with
    _build's own flags, so that a mutant in csrc/ costs one or a few compiler runs and a link."""

    def __init__(self):
        import importlib.util

        # By path, as setup.py loads it: importing the package would load the table library being replaced.
        spec = importlib.util.spec_from_file_location("tdb_build", os.path.join(REPO, "torch_dlpack_bridge", "_build.py"))
        _build = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = _build  # dataclasses look their module up there
        spec.loader.exec_module(_build)
        self.build = _build
        self.target = _build.installed_torch()
        self.cxx = _build.find_compiler()
        if self.cxx is None:
            raise SystemExit("mutate: no C++ compiler (set CXX)")
        self.csrc = os.path.join(REPO, "csrc")
        self.flags = _build.compile_flags(self.target)
        self.link_flags = _build.link_flags(self.target)
        self.path = os.path.join(REPO, "torch_dlpack_bridge", "_lib", self.target.library_name)
        flags_digest = hashlib.sha256(json.dumps([self.cxx, *self.flags, *self.link_flags]).encode()).hexdigest()
        key = f"{_build.sources_digest(self.csrc)}-{flags_digest[:8]}"
        self.objects_dir = os.path.join(WORK, "objects", key)
        self.baseline = os.path.join(self.objects_dir, self.target.library_name)
        self.sources = _build.table_sources(self.csrc)

    def compile(self, source: str, out_dir: str) -> str:
        obj = os.path.join(out_dir, os.path.basename(source) + ".o")
        self.build.Commands().run([self.cxx, *self.flags, "-MMD", "-MF", obj + ".d", "-c", source, "-o", obj])
        return obj

    def link(self, objects: List[str], output: str) -> None:
        self.build.Commands().run([self.cxx, *objects, "-o", output, *self.link_flags])

    def prepare(self) -> None:
        """Compiles the unmutated sources once (cached across runs) and links the baseline library."""
        if os.path.isfile(self.baseline):
            return
        start = time.monotonic()
        print(f"mutate: compiling the table's {len(self.sources)} sources once into "
              f"{os.path.relpath(self.objects_dir, REPO)}/ ...", flush=True)
        tmp = self.objects_dir + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
            objects = list(pool.map(lambda s: self.compile(s, tmp), self.sources))
        self.link(objects, os.path.join(tmp, self.target.library_name))
        for old in os.listdir(os.path.dirname(self.objects_dir)):  # objects of other sources: stale
            if old != os.path.basename(tmp):
                shutil.rmtree(os.path.join(os.path.dirname(self.objects_dir), old), ignore_errors=True)
        os.replace(tmp, self.objects_dir)
        print(f"mutate: compiled in {time.monotonic() - start:.0f} s", flush=True)

    def dependents(self, path: str) -> List[str]:
        """The table's sources whose objects depend on `path` (a source or a header, from the .d files)."""
        path = os.path.realpath(path)
        found = []
        for source in self.sources:
            with open(os.path.join(self.objects_dir, os.path.basename(source) + ".o.d")) as f:
                deps = f.read().replace("\\\n", " ").split(":", 1)[1].split()
            if path in {os.path.realpath(os.path.join(REPO, d)) for d in deps}:
                found.append(source)
        return found

    def install(self, tree: Tree, changed: List[str]) -> None:
        """Puts into _lib/ the library built with the (mutated) `changed` sources, the rest from the cache."""
        with tempfile.TemporaryDirectory(dir=WORK) as tmp:
            objects = [self.compile(s, tmp) if s in changed else
                       os.path.join(self.objects_dir, os.path.basename(s) + ".o") for s in self.sources]
            output = os.path.join(tmp, self.target.library_name)
            self.link(objects, output)
            with open(output, "rb") as f:
                tree.change(self.path, f.read(), 0o755)

    def use_baseline(self, tree: Tree) -> None:
        with open(self.baseline, "rb") as f:
            tree.change(self.path, f.read(), 0o755)


def installed_copies(path: str) -> List[str]:
    """Where an install put copies of `path` (the autoload hook goes to the top of site-packages)."""
    name = os.path.basename(path)
    if os.path.dirname(os.path.relpath(path, REPO)) != "autoload" or name not in AUTOLOAD_FILES:
        return []
    installed = os.path.join(sysconfig.get_paths()["purelib"], name)
    return [installed] if os.path.isfile(installed) else []


# ---- running ---------------------------------------------------------------------------------------------

def pytest(files: List[str], timeout: float, log_path: str, stop_at_first: bool = True):
    """Runs pytest on `files` in its own process group; (return code or None on timeout, first failed test)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
               TORCH_EXTENSIONS_DIR=os.path.join(WORK, "torch_extensions"))  # not shared with other checkouts
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(["-x"] if stop_at_first else []),
               *files]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # also on Ctrl-C: the tests' whole process group goes, with anything they left running
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
            process.wait()
    with open(log_path, errors="replace") as f:
        failed = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", f.read(), re.M)
    return code, failed.group(1) if failed else ""


def run_mutant(m: Mutant, tree: Tree, library: Optional[TableLibrary], timeout: float) -> None:
    path = os.path.join(REPO, m.file)
    with open(path, "rb") as f:
        text = f.read().decode()
    mutated = text.replace(m.original, m.replacement, 1).encode()
    start = time.monotonic()
    try:
        tree.change(path, mutated)
        for copy in installed_copies(path):
            tree.change(copy, mutated)
        changed = library.dependents(path) if library else []
        if changed:
            try:
                library.install(tree, changed)
            except RuntimeError as error:
                m.status, m.detail = "stale", "does not compile: " + str(error).splitlines()[-1][:200]
                return
        log = os.path.join(WORK, "logs", m.id + ".log")
        code, failed = pytest(m.tests, timeout, log)
        if code is None:
            m.status, m.detail = "killed", f"timed out after {timeout:g} s"
        elif code == 0:
            m.status = "survived"
        else:
            m.status, m.detail = "killed", failed or f"pytest exit code {code} (see {os.path.relpath(log, REPO)})"
    finally:
        tree.restore()
        m.seconds = time.monotonic() - start


def interrupt_on_signals() -> None:
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


# ---- the report -------------------------------------------------------------------------------------------

def score(mutants: List[Mutant]):
    counted = [m for m in mutants if m.status not in ("equivalent", "not run")]
    killed = sum(m.status == "killed" for m in counted)
    return killed, len(counted)


def this_run() -> str:
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    return f"`{commit}`, {time.strftime('%Y-%m-%d')}"


def report(mutants: List[Mutant], seconds: float, baseline_seconds: Optional[float]) -> str:
    """The report of a run; with results merged from earlier runs (--merge-report), the score line says how many
    were run now, how many come from earlier runs (each row names its run) and how many were never run."""
    killed, counted = score(mutants)
    import torch

    now = [m for m in mutants if not m.run and m.status in ("killed", "survived")]
    earlier = [m for m in mutants if m.run and m.status != "not run"]
    never = [m for m in mutants if m.status == "not run"]
    merged = f" over {counted} of the catalogue's {len(mutants)} mutants with a result" if earlier or never else ""
    lines = [f"Score **{killed}/{counted} = {100.0 * killed / max(counted, 1):.1f} %** killed{merged} (equivalent "
             f"mutants not counted; stale ones count as not killed), {this_run()}, torch {torch.__version__}: "
             f"{len(now)} run in {seconds / 60:.1f} min on {os.cpu_count()} cores"
             + (f", of which {baseline_seconds / 60:.1f} min the baseline run of the tests" if baseline_seconds
                else "")
             + (f"; {len(earlier)} results from earlier runs (the row says which)" if earlier else "")
             + (f"; {len(never)} with no result recorded here (not run: not counted)" if never else "") + ".", "",
             "| File | Mutants | Killed | Survived | Stale | Equivalent | Not run |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    files = sorted({m.file for m in mutants})
    for file in files:
        ms = [m for m in mutants if m.file == file]
        lines.append(f"| `{file}` | {len(ms)} | " + " | ".join(str(sum(m.status == s for m in ms)) for s in STATUSES)
                     + " |")
    lines += ["", "| Mutant | File | Result | Killed by, or why | Seconds | Run |", "|---|---|---|---|---:|---|"]
    for m in mutants:
        detail = m.equivalent if m.status == "equivalent" else m.detail
        lines.append(f"| `{m.id}` | `{m.file}` | {m.status} | {detail.replace('|', '/')} | {m.seconds:.0f} | "
                     f"{m.run or ('this run' if m.status in ('killed', 'survived') else '-')} |")
    return "\n".join(lines) + "\n"


def merge_earlier(mutants: List[Mutant], path: str) -> None:
    """Gives each mutant not run now (no status) its result in the report at `path`, as that report's row has
    it, with the run it came from (the row's, or that report's for a report written before rows named theirs);
    a mutant with no row there, or one whose file or snippet changed since (stale now), is "not run"."""
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    header = re.search(r"`([^`]+)`, (?:torch [^,]+, )?(\d{4}-\d\d-\d\d)", text)
    whole = f"`{header.group(1)}`, {header.group(2)}" if header else "an earlier run"
    rows = {}
    for line in text.splitlines():
        row = re.match(r"\| `([^`]+)` \| `[^`]+` \| (killed|survived) \| (.*) \| (\d+) \|(?: (.*) \|)?$", line)
        if row:
            run = row.group(5) if row.group(5) and row.group(5) != "this run" else whole
            rows[row.group(1)] = (row.group(2), row.group(3), float(row.group(4)), run)
    for m in mutants:
        if m.status:
            continue
        if m.id in rows:
            m.status, m.detail, m.seconds, m.run = rows[m.id]
        else:
            m.status, m.run = "not run", "never"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="run this mutant id (repeatable)")
    parser.add_argument("--file", action="append", default=[], help="run the mutants of files whose path contains FILE (repeatable)")
    parser.add_argument("--check", action="store_true", help="only report stale mutants (exit 1 if any)")
    parser.add_argument("--list", action="store_true", help="list the mutants")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per mutant's tests (default 900)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    parser.add_argument("--catalogue", default=CATALOGUE)
    parser.add_argument("--merge-report", action="store_true",
                        help="after a subset run, write scripts/mutation.md with the other mutants' results from "
                             "the report there (each row names its run; mutants it lacks are listed as not run)")
    args = parser.parse_args()

    os.makedirs(os.path.join(WORK, "logs"), exist_ok=True)
    Tree.recover()
    mutants = load_catalogue(args.catalogue)
    unknown = set(args.only) - {m.id for m in mutants}
    if unknown:
        raise SystemExit(f"mutate: no mutant {', '.join(sorted(unknown))} in {args.catalogue}")
    subset = bool(args.only or args.file)
    catalogue = mutants
    if subset:
        mutants = [m for m in mutants if m.id in args.only or any(f in m.file for f in args.file)]
    for m in mutants:
        reason = stale_reason(m)
        if reason:
            m.status, m.detail = "stale", reason
        elif m.equivalent:
            m.status = "equivalent"
    if args.list or args.check:
        for m in mutants:
            print(f"{m.id:44} {m.file:58} {m.status or 'ok'} {m.detail}")
        stale = [m for m in mutants if m.status == "stale"]
        print(f"{len(mutants)} mutants, {len(stale)} stale")
        return 1 if args.check and stale else 0

    interrupt_on_signals()
    start = time.monotonic()
    to_run = [m for m in mutants if not m.status]
    library = None
    if any(m.file.startswith("csrc/") or m.file.endswith("dlpack.h") for m in to_run):
        library = TableLibrary()
        library.prepare()
    tree = Tree()
    baseline_seconds = None
    try:
        if library is not None:
            library.use_baseline(tree)  # the tests run against the sources as they are now
        if not args.no_baseline and to_run:
            files = list(dict.fromkeys(t for m in to_run for t in m.tests))
            print(f"mutate: baseline run of {len(files)} test file(s) ...", flush=True)
            code, failed = pytest(files, args.timeout * 2, os.path.join(WORK, "logs", "baseline.log"))
            baseline_seconds = time.monotonic() - start
            if code != 0:
                print(f"mutate: the tests fail without any mutant ({failed or code}; build/mutate/logs/baseline.log):"
                      f" fix that first, a score would mean nothing", file=sys.stderr)
                return 2
            print(f"mutate: baseline passed in {baseline_seconds:.0f} s", flush=True)
        for i, m in enumerate(to_run, 1):
            run_mutant(m, tree, library, args.timeout)
            if library is not None:
                library.use_baseline(tree)
            print(f"[{i}/{len(to_run)}] {m.id} ({m.file}): {m.status} in {m.seconds:.0f} s {m.detail}", flush=True)
    except KeyboardInterrupt:
        print("mutate: interrupted; the tree is restored", file=sys.stderr)
        return 130
    finally:
        tree.restore()  # the library as it was before the run
    seconds = time.monotonic() - start
    if subset and args.merge_report:
        to_report = catalogue
        for m in catalogue:  # those outside the subset: stale or equivalent as they stand now
            reason = "" if m.status else stale_reason(m)
            if reason:
                m.status, m.detail = "stale", reason
            elif not m.status and m.equivalent:
                m.status = "equivalent"
        merge_earlier(catalogue, REPORT)
    else:
        to_report = mutants
    text = report(to_report, seconds, baseline_seconds)
    print("\n" + text)
    for m in mutants:
        if m.status in ("survived", "stale"):
            print(f"NOT KILLED {m.id}: {m.status} {m.detail}")
    if not subset or args.merge_report:
        with open(REPORT, "w") as f:
            f.write("<!-- written by scripts/mutate.py; do not edit -->\n" + text)
        print(f"mutate: wrote {os.path.relpath(REPORT, REPO)}")
    killed, counted = score(mutants)
    print(f"mutate: {killed}/{counted} killed, {seconds:.0f} s ({seconds / 60:.1f} min)")
    return 0 if killed == counted else 1


if __name__ == "__main__":
    sys.exit(main())
