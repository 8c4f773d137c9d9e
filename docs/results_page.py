"""benchmarks/RESULTS.md as the Benchmarks page shows it.

The benchmark scripts write, beside the measurements, notes the project keeps for itself: each section's goals,
met or not (`- Goal met: ...`, `- **Goal not met**: ...`, a `### Goals` list, the ratios no goal judges), and the commit that was measured.
On the site they read as internal notes, so conf.py writes this version, without them, for the page to include;
RESULTS.md in the source tree keeps them.
"""
from __future__ import annotations

import re

# A "### Goals" heading with its list, or a goal line of a section's list, or the line that follows the goals with
# the ratios no goal judges ("- Not a goal, for the reader: ...", "- For the reader, per call ...": the section's
# tables hold them).
GOALS = re.compile(r"^### Goals\n\n(?:- .*\n)+\n?|^- (?:Goal met: |\*\*Goal not met\*\*: |Not a goal\b|For the reader\b).*\n",
                   re.M)
# The machine section's "commit 00cdca5[ + local csrc changes], " before the table library's build time.
COMMIT = re.compile(r"commit [0-9a-f]{7,40}(?: \+ local csrc changes)?, ")


def page_version(results: str) -> str:
    """`results` (RESULTS.md's text) without the goal lines and the measured commit."""
    return COMMIT.sub("", GOALS.sub("", results))
