"""Turns Doxygen's XML of the consumer headers into the C++ reference pages' generated parts.

conf.py runs Doxygen, then `generate(xml_dir, out_dir)`: for each header, `out_dir/<header>.md` holds summary
tables, one per kind (every documented class, function, type, constant and macro of the header, linked to its
entry, with its one-line description), and the Breathe directive that renders the header's entries. The
hand-written pages in docs/reference/cpp/ include them; `PAGES` says which page shows which header, and a
header no page shows stops the build.
"""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from typing import Dict, List, Tuple

# Page (docs/reference/cpp/<page>.md) -> the headers it shows, in the order a kernel author needs them.
PAGES = {
    "tensor": ["tensor.h", "dtypes.h", "annotations.h", "accessors.h", "signature.h", "autograd.h"],
    "output": ["output.h"],
    "consumer": ["consumer.h", "view.h", "managed.h", "errors.h", "checks.h", "allocate.h", "dltensor.h",
                 "table.h", "protocol.h", "names.h", "config.h"],
    "bindings": ["pybind11.h", "nanobind.h", "refusals.h", "call.h"],
    "dlpack": ["dlpack.h"],
}
# The front door: shown first in its header's summary (then the header's own order).
FIRST = ["tdb::Tensor", "tdb::StridedView", "tdb::ContiguousView", "tdb::TensorView", "tdb::ManagedTensor",
         "tdb::Error", "tdb::guard"]
KIND_TITLES = [("class", "Classes and types"), ("function", "Functions"), ("variable", "Constants"),
               ("typedef", "Type aliases"), ("enum", "Enumerations"), ("define", "Macros")]
# The first column's head in a summary table of that kind.
KIND_HEADS = {"class": "Class or type", "function": "Function", "variable": "Constant", "typedef": "Type alias",
              "enum": "Enumeration", "define": "Macro"}


def flatten_code_lines(xml_dir: str) -> None:
    r"""Makes each line of a \code block one plain run of text in Doxygen's XML.

    Breathe 5.1 drops a line's indentation when Doxygen puts it in a run of its own (before a keyword or a
    cross-reference), so examples lost their nesting. Pygments highlights the block again anyway; what is lost
    is only the links on names inside code blocks. The same pass joins quoted strings broken over two comment
    lines (join_quoted_lines).
    """
    def flat(match: "re.Match[str]") -> str:
        text = re.sub(r"<[^>]+>", "", match.group(1).replace("<sp/>", " "))  # entities stay escaped
        return '<codeline><highlight class="normal">' + text.replace(" ", "<sp/>") + "</highlight></codeline>"

    for name in os.listdir(xml_dir):
        path = os.path.join(xml_dir, name)
        with open(path, encoding="utf-8") as f:
            xml = f.read()
        fixed = join_quoted_lines(re.sub(r"<codeline>(.*?)</codeline>", flat, xml, flags=re.S))
        if fixed != xml:
            with open(path, "w", encoding="utf-8") as f:
                f.write(fixed)


# A double-quoted string of a doc comment broken over two comment lines: Doxygen keeps the line break in the
# text (it reads quoted strings verbatim) and Breathe ends the paragraph there, mid-quote.
QUOTED_BREAK = re.compile(r"(&quot;[^<&]*?)\n\s*([^<]*?&quot;)")


def join_quoted_lines(xml: str) -> str:
    """`xml` with each quoted string's line break (in text, never in a code block's lines) made a space."""
    return QUOTED_BREAK.sub(r"\1 \2", xml)


def _brief(node) -> str:
    """The first sentence of an entry's brief, code kept as code."""
    b = node.find("briefdescription")
    if b is None:
        return ""
    for code in b.iter("computeroutput"):
        code.text, code.tail = "`" + "".join(code.itertext()), "`" + (code.tail or "")
        for child in list(code):
            code.remove(child)
    text = " ".join("".join(b.itertext()).split())
    first = re.split(r"(?<!e\.g)(?<!i\.e)(?<=[.])\s(?=[A-Z`(])", text, maxsplit=1)[0]
    return first.replace("|", "\\|")


HEADERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch_dlpack_bridge", "include",
                       "torch_dlpack_bridge")
# A header's own words for one that a kernel author never includes (refusals.h: "Included by pybind11.h and
# nanobind.h; a kernel author never includes it directly."): its page says so instead of showing an #include.
NEVER_INCLUDED = re.compile(r"Included by ([^;]+); a kernel author never includes it directly")


def include_line(header: str) -> str:
    """How a kernel gets the header's names: `#include <torch_dlpack_bridge/HEADER>`, or, for a header that a
    kernel author never includes, which headers include it."""
    with open(os.path.join(HEADERS, header), encoding="utf-8") as f:
        found = NEVER_INCLUDED.search(" ".join(f.read().split()))
    if found:
        return f"`torch_dlpack_bridge/{header}` is included by {found.group(1).strip()}, never directly"
    return f"`#include <torch_dlpack_bridge/{header}>`"


def _compound(xml_dir: str, refid: str):
    return ET.parse(os.path.join(xml_dir, refid + ".xml")).getroot().find("compounddef")


class Entry:
    """One row of a summary: its names (a constant group has several), brief, and Breathe directives."""

    def __init__(self, kind: str, name: str, brief: str) -> None:
        self.kind, self.names, self.brief, self.directives = kind, [name], brief, []  # type: ignore


def _params(member) -> str:
    """`(type, type)` of a function, as Breathe matches overloads."""
    return "(" + ", ".join(" ".join("".join(p.find("type").itertext()).split()) for p in member.findall("param")
                           if p.find("type") is not None) + ")"


def entries(xml_dir: str, header: str) -> Dict[str, List[Entry]]:
    """{kind: [Entry]} of the entries a header declares, the front door first, then in the header's order.

    Overloads share one row (each gets its directive); undocumented constants that follow a documented one
    (kInt8 after kBool, under one comment) share its row. Undocumented names of other kinds are left out.
    """
    found: Dict[str, List[Entry]] = {kind: [] for kind, _ in KIND_TITLES}
    by_name: Dict[Tuple[str, str], Entry] = {}
    path = "torch_dlpack_bridge/" + header
    file_def = _compound(xml_dir, header.replace(".", "_8"))
    classes = [c.text or "" for c in file_def.findall("innerclass")]
    for inner in file_def.findall("innerclass"):
        name = inner.text or ""
        nested = "::" in name and name.rsplit("::", 1)[0] in classes
        if inner.get("prot") != "public" or "<" in name or nested:  # specializations: under their template
            continue
        compound = _compound(xml_dir, inner.get("refid"))
        entry = Entry("class", name, _brief(compound))
        entry.directives.append(f"{include_line(header)}\n\n"
                                f"```{{doxygen{compound.get('kind')}}} {name}\n:members:\n```")
        found["class"].append(entry)
    # Namespace members (functions, aliases, constants) live in the namespaces' XML with their file.
    index = ET.parse(os.path.join(xml_dir, "index.xml")).getroot()
    scopes = [file_def] + [_compound(xml_dir, c.get("refid")) for c in index.findall("compound")
                           if c.get("kind") == "namespace"]
    for scope in scopes:
        prefix = "" if scope is file_def else scope.find("compoundname").text + "::"
        for member in scope.iter("memberdef"):
            location = member.find("location")
            kind = member.get("kind")
            if location is None or location.get("file") != path or kind not in found:
                continue
            name, brief = prefix + member.findtext("name"), _brief(member)
            entry = by_name.get((kind, name))
            if entry is None and (brief or kind == "function"):
                entry = by_name[(kind, name)] = Entry(kind, name, brief)
                found[kind].append(entry)
            elif entry is None and kind == "variable" and found[kind]:
                entry = found[kind][-1]
                entry.names.append(name)
            elif entry is None:
                continue
            target = name + _params(member) if kind == "function" else name
            entry.directives.append(f"```{{doxygen{kind}}} {target}\n```")
            entry.brief = entry.brief or brief
    found["function"] = [e for e in found["function"] if e.brief]
    for rows in found.values():
        rows.sort(key=lambda e: FIRST.index(e.names[0]) if e.names[0] in FIRST else len(FIRST))
    return found


def page(xml_dir: str, header: str, level: int) -> str:
    """The generated part of one header's page, as MyST markdown: the summary table, the header's own
    description (with its examples), then every entry; headings at `level` (2: ##)."""
    found = entries(xml_dir, header)
    namespaced = any("tdb::" in e.names[0] for rows in found.values() for e in rows)
    lines = [include_line(header) + (" (names in namespace `tdb`)" if namespaced else "")]
    # One table per kind, the kind in its header row (a header of implementation details only, protocol.h, or
    # of includes gets none).
    for kind, title in KIND_TITLES:
        role = "c:macro" if kind == "define" else "cpp:any"
        if found[kind]:
            lines += ["", f"| {KIND_HEADS[kind]} | What it {'does' if kind == 'function' else 'is'} |", "|---|---|"]
        for e in found[kind]:
            # Shown without the namespace (the page is about tdb), linked to the full name.
            shown = ", ".join(f"{{{role}}}`{n.replace('tdb::', '', 1)} <{n}>`" for n in e.names)
            lines.append(f"| {shown} | {e.brief} |")
    hashes = "#" * level
    lines += ["", f"{hashes} About {header}", "",
              f"```{{doxygenfile}} {header}\n:sections: briefdescription detaileddescription\n```"]
    for kind, title in KIND_TITLES:
        if found[kind]:
            lines += ["", f"{hashes} {title}", ""]
        for e in found[kind]:
            lines += e.directives
    return "\n".join(lines) + "\n"


def generate(xml_dir: str, out_dir: str, headers: List[str]) -> None:
    """Writes out_dir/<header>.md (summary table + entries) for every header."""
    shown = {h for hs in PAGES.values() for h in hs}
    missing = sorted(set(headers) - shown)
    if missing:
        raise SystemExit(f"docs: no C++ reference page shows {missing}: add them to PAGES in docs/cpp_reference.py")
    os.makedirs(out_dir, exist_ok=True)
    for header in headers:
        with open(os.path.join(out_dir, header + ".md"), "w", encoding="utf-8") as f:
            pages = [p for p, hs in PAGES.items() if header in hs]
            f.write(page(xml_dir, header, 2 if len(PAGES[pages[0]]) == 1 else 3))
