"""The wheel matrix as the support page shows it: scripts/wheel_matrix.md, written by scripts/wheel_matrix.sh
(which also reads its rows back), has nine columns, too many for a desktop's column; conf.py writes the page's
version into docs/_build/generated/: the row's wheel (architecture, torch, Python) in one column, the installed
torch as code (a version breaks only between its parts), and the notes, long where a row has any, as a list
under the table. Same rows, same words."""
from __future__ import annotations

from typing import List


def page_version(text: str) -> str:
    """`text` (scripts/wheel_matrix.md) without its title, its table regrouped as above."""
    lines = text.splitlines()[1:]  # the title: the page has its own heading
    table = [i for i, line in enumerate(lines) if line.startswith("|")]
    if not table:
        return "\n".join(lines) + "\n"
    head = [c.strip() for c in lines[table[0]].strip().strip("|").split("|")]
    out: List[str] = lines[:table[0]]
    out += ["| wheel | " + " | ".join(head[3:7]) + f" | {head[8]} |", "|---|" + "---|" * 5]
    notes = []
    for i in table[2:]:
        cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        wheel = f"{cells[0]}, torch {cells[1]}, Python {cells[2]}"
        installed = f"`{cells[3]}`" if cells[3] and " " not in cells[3] else cells[3]  # a version: whole
        out.append(f"| {wheel} | {installed} | " + " | ".join(cells[4:7]) + f" | {cells[8]} |")
        if cells[7]:
            notes.append(f"- {wheel}: {cells[7]}")
    out += lines[table[-1] + 1:]
    if notes:
        out += ["", "Notes:", ""] + notes
    return "\n".join(out) + "\n"
