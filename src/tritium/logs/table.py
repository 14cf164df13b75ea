"""Triton's ASCII tables (common/src/table_printer.cc), as the start-up model table prints them.

``+-------+---------+--------+`` / ``| Model | Version | Status |``: every column as wide as its
widest line when the table fits the terminal (Triton asks the terminal of stdout; 500 columns
when it is not one), else the width shared fairly and long cells cut into several lines.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

_NO_TERMINAL_WIDTH = 500


def terminal_width() -> int:
    """Columns of stdout's terminal, or Triton's 500 when it is not a terminal."""
    try:
        return os.get_terminal_size(1).columns or _NO_TERMINAL_WIDTH
    except OSError:
        return _NO_TERMINAL_WIDTH


def render_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], width: int = _NO_TERMINAL_WIDTH
) -> str:
    """The table as Triton's ``TablePrinter::PrintTable`` writes it: a leading newline, then
    border, headers, border, rows, border, each line ending in a newline."""
    records = [[_cell_lines(cell) for cell in headers]]
    records += [[_cell_lines(str(cell)) for cell in row] for row in rows]
    shares = _fair_shares(
        width,
        [max(len(line) for cell in col for line in cell) for col in zip(*records, strict=True)],
    )
    records = [[_wrap(cell, share) for cell, share in zip(r, shares, strict=True)] for r in records]
    border = "+" + "+".join("-" * (share + 2) for share in shares) + "+\n"
    out = ["\n", border, _row(records[0], shares), border]
    out += [_row(record, shares) for record in records[1:]]
    out.append(border)
    return "".join(out)


def _cell_lines(text: str) -> list[str]:
    """A cell's lines as ``std::getline`` reads them: a last newline ends a line, it does not
    start an empty one (a Python model's error text ends with one)."""
    lines = text.split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines


def _fair_shares(width: int, widths: list[int]) -> list[int]:
    """Triton's FairShare: equal shares of the terminal; a column that needs less gives the
    rest to the wider columns after it."""
    count = len(widths)
    needed = 3 * count + 1  # a space each side of every column, and the pipes
    usable = width - needed if width > needed else count
    shares: list[float] = [float(usable // count)] * count
    order = sorted(range(count), key=lambda i: widths[i])  # stable, as std::stable_sort
    for position, index in enumerate(order):
        if widths[index] < shares[index]:
            excess = shares[index] - widths[index]
            shares[index] = widths[index]
            if position == count - 1:
                break
            for later in order[position + 1 :]:
                shares[later] += excess / (count - position - 1)
    return [max(int(share), 1) for share in shares]


def _wrap(lines: list[str], share: int) -> list[str]:
    out: list[str] = []
    for line in lines:
        out += [line[i : i + share] for i in range(0, len(line), share)] or [""]
    return out


def _row(cells: list[list[str]], shares: list[int]) -> str:
    height = max(len(cell) for cell in cells)
    lines = []
    for j in range(height):
        parts = [
            (cell[j] if j < len(cell) else "").ljust(share)
            for cell, share in zip(cells, shares, strict=True)
        ]
        lines.append("|" + "".join(f" {part} |" for part in parts))
    return "\n".join(lines) + "\n"


def model_table(index: Iterable[Mapping[str, str]], width: int = _NO_TERMINAL_WIDTH) -> str:
    """Triton's start-up table of models (core server.cc PrintBackendAndModelSummary) from
    the repository index: one row per version the server knows, ``READY`` or
    ``UNAVAILABLE: <reason>``; a model with no version "-" and its reason. Models on disk that
    were never loaded (explicit mode) are not listed, as in Triton."""
    rows = []
    for entry in index:
        state = entry.get("state")
        if not state:
            continue
        reason = entry.get("reason", "")
        version = entry.get("version")
        if version is None:
            status = f"{state}: {reason}" if reason else "Not loaded: No model version was found"
            rows.append((entry["name"], "-", status))
        else:
            rows.append((entry["name"], version, f"{state}: {reason}" if reason else state))
    return render_table(("Model", "Version", "Status"), rows, width)
