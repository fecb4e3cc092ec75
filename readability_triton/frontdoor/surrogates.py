"""A lone surrogate's escape in JSON text, found without decoding it: the front door refuses
such a request as the client's error (`wire`), since Python's json decodes it to a string
that is not Unicode and tritonserver answers it with a server error."""

from __future__ import annotations

import re

#: A run of backslashes, then "u" and the hex digits of a surrogate (D800-DFFF): the
#: candidates of a lone surrogate's escape. Python's re finds it by its literal prefix (a
#: leading group would hide that prefix from it), at about 1 us on a 0.9 kB request without
#: one; the pattern it replaces tried a lookbehind at every byte (55 us).
_SURROGATE_ESCAPE = re.compile(rb"\\(?:\\*)u[dD]([89a-fA-F])[0-9a-fA-F]{2}")
_HIGH = frozenset(b"89abAB")


def lone_surrogate(data: bytes | memoryview) -> bool:
    """Whether JSON text holds a \\u escape of a surrogate that is not one half of a pair:
    a high one (D800-DBFF) not followed at once by a low one (DC00-DFFF), or a low one not
    right after a high one. An escape is a "u" after an odd run of backslashes (an even run
    is escaped backslashes, and the "u" is text)."""
    pending = -1  # where the last high escape ended, while it waits for its low half
    for found in _SURROGATE_ESCAPE.finditer(data):
        run = found.end() - found.start() - 5  # the backslashes before "uDXXX"
        if run % 2 == 0:
            continue  # "\\\\ud800": text, not an escape
        high = found.group(1)[0] in _HIGH
        if pending >= 0:
            if not high and run == 1 and found.start() == pending:
                pending = -1  # the pair is whole
                continue
            return True  # the high escape before this one had no low half after it
        if not high:
            return True  # a low half with no high one before it
        pending = found.end()
    return pending >= 0
