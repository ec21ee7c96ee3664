"""LLM reply -> ranked index list. Every fix is reported; nothing is guessed silently."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LIST = re.compile(r"\[\s*(?:-?\d+\s*,\s*)*-?\d+\s*,?\s*\]")
_INT = re.compile(r"-?\d+")


class UnparseableReply(ValueError):
    """The reply holds no usable ranking."""


@dataclass(frozen=True)
class ParsedRanking:
    indices: list[int]
    problems: list[str] = field(default_factory=list)  # one line per fix; empty: the reply was clean

    @property
    def repaired(self) -> bool:
        return bool(self.problems)


def parse_ranking(reply: str, n_candidates: int, want: int) -> ParsedRanking:
    """The first ``want`` valid, distinct indices of the list in ``reply``.

    Out-of-range and repeated indices are dropped, extra ones cut; a short list stays short (the
    caller decides how to fill it). Raises UnparseableReply when no valid index is left.
    """
    lists = _LIST.findall(reply or "")
    if not lists:
        raise UnparseableReply("no list of integers in the reply")
    problems = []
    if len(lists) > 1:
        problems.append(f"{len(lists)} lists in the reply; took the last")
    indices: list[int] = []
    for value in map(int, _INT.findall(lists[-1])):
        if not 0 <= value < n_candidates:
            problems.append(f"dropped index {value}: outside 0..{n_candidates - 1}")
        elif value in indices:
            problems.append(f"dropped repeated index {value}")
        else:
            indices.append(value)
    if not indices:
        raise UnparseableReply("the list holds no valid index")
    if len(indices) > want:
        problems.append(f"cut {len(indices) - want} indices beyond the {want} asked for")
        indices = indices[:want]
    elif len(indices) < want:
        problems.append(f"{len(indices)} indices where {want} were asked for")
    return ParsedRanking(indices, problems)
