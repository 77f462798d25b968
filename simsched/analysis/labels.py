"""Labels for figures: long names (scaled machines, machines with overrides) wrapped to the room they have."""

from __future__ import annotations

import re

# Where a name may break: after a comma, colon, semicolon or space, and before the '[' of a machine's
# overrides; a piece still too long, also after the dot of a SECTION.KEY (not a decimal point).
_BREAKS = re.compile(r"(?<=[,:; ])|(?=\[)")
_DOTS = re.compile(r"(?<=\.)(?=[A-Za-z_])")
_SEPARATORS = ",:; "


def _pieces(paragraph: str, width: int) -> list[str]:
    pieces = []
    for piece in (p for p in _BREAKS.split(paragraph) if p):
        pieces.extend(_DOTS.split(piece) if len(piece.rstrip(_SEPARATORS)) > width else [piece])
    return pieces


def wrap_label(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` characters, broken where a name allows it, else hard."""
    width = max(int(width), 8)
    lines = []
    for paragraph in str(text).split("\n"):
        line = ""
        for piece in _pieces(paragraph, width):
            if line and len(line) + len(piece.rstrip(_SEPARATORS)) > width:
                lines.append(line.rstrip())
                line = piece.lstrip()
            else:
                line += piece
            # A separator may end a full line rather than begin the next.
            while len(line.rstrip(_SEPARATORS)) > width:
                lines.append(line[:width])
                line = line[width:]
        lines.append(line.rstrip())
    return "\n".join(lines)


def chars_across(inches: float, fontsize: float) -> int:
    """About how many characters of a ``fontsize`` point font fit across ``inches``."""
    # An average glyph of the default sans-serif font is a little over half its size wide.
    return max(int(inches * 72 / (0.6 * fontsize)), 8)
