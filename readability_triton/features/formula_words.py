"""The words and sentences the classic formulas count (docs/formulas.md, "Words and
sentences"), built from the spec's words (`words.find_words`) in array code for NumPy and
CuPy: no loop over texts or words. The 207 features keep the spec's own words and sentences;
only the formulas count these.

- a formula word is a run of spec words joined by one `-` (`well-known`), one `.` between
  word characters (`U.S`, `52.2`, `www.example.com`), one `@`, `/` or `&` (`a@b.org`,
  `and/or`, `AT&T`), `://` (a URL's scheme), or one `,` between digits (`2,200,000`);
- a run of terminators ends a sentence, except: a single `.` directly followed by a word
  character; a single `.` right after a title or abbreviation of `ABBREVIATIONS`, after one
  of `BEFORE_NUMBERS` when a number follows (`No. 5`), or after a single-letter initial (a
  capital other than `I`, or any letter right after a `.`: `J.`, `e.g.`); dots and ellipses
  (no `!` or `?`) followed by a word in lower case (`I was... thinking`);
- Gunning's proper nouns: formula words capitalised (ASCII `A`-`Z`) that do not open a
  sentence.

`cased` is the batch buffer before lower-casing (`charclass.buffer_pairs`: U+2019 already
read as `'`), at the same positions as the buffer the words were found in.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import charclass, words

#: Titles and abbreviations whose dot never ends a sentence (normal form, at most 7 bytes).
ABBREVIATIONS = (
    "mr", "mrs", "ms", "messrs", "mme", "mlle", "dr", "prof", "rev", "hon", "st", "mt", "ft", "jr", "sr",
    "gen", "col", "maj", "capt", "lt", "sgt", "cpl", "adm", "cmdr", "gov", "sen", "rep", "pres", "supt",
    "vs", "viz", "cf", "approx", "dept", "univ", "jan", "feb", "aug", "sept", "oct", "nov", "dec",
)  # fmt: skip
#: Abbreviations whose dot ends no sentence when a number follows (`No. 5`, but `said no.`).
BEFORE_NUMBERS = ("no", "nos", "vol", "fig", "pp", "ch", "art")


def heads(entries) -> np.ndarray:
    """The `Tokens.head` of each entry (a spec word of at most 7 bytes), sorted: for such
    words the head is the word, so equal heads are equal words."""
    out = []
    for entry in entries:
        raw = entry.encode("ascii")
        if not 0 < len(raw) <= 7 or not raw.isalpha() or raw != raw.lower():
            raise ValueError(f"{entry!r}: an abbreviation is 1 to 7 lower-case ASCII letters")
        out.append(int.from_bytes(raw, "little"))
    return np.array(sorted(out), dtype=np.uint64)


ALWAYS_HEADS, NUMBER_HEADS = heads(ABBREVIATIONS), heads(BEFORE_NUMBERS)


def between(values, lo: str, hi: str):
    """Is each byte from `lo` to `hi`?"""
    return (values >= ord(lo)) & (values <= ord(hi))


def _listed(xp, head, lengths, table: np.ndarray):
    """Is each word (its head and length) one of the table's words?"""
    listed = charclass.on_device(xp, f"abbreviations_{table.size}_{int(table[0])}", table)
    at = xp.minimum(xp.searchsorted(listed, head), listed.size - 1)
    return (listed[at] == head) & (lengths <= 7)


class Segments:
    """Formula words and sentences of one buffer's spec words (all arrays on the device):

    `numeric` and `hyphen` (bool per spec word: joined to the word before by a digit
    separator / a hyphen), `opens` (bool
    per spec word: a formula sentence opens there; only at a formula word's first), `starts`
    (the first spec word of each formula word), `group_bound` (per text: its formula words
    are `group_bound[i]:group_bound[i+1]`)."""

    __slots__ = ("numeric", "hyphen", "opens", "starts", "group_bound")
    numeric: Any
    hyphen: Any
    opens: Any
    starts: Any
    group_bound: Any


def segments(xp, tokens: words.Tokens, word_bound, cased) -> Segments:
    data, s, e = tokens.data, tokens.starts, tokens.ends
    W = int(s.size)
    seg = Segments()
    joined = xp.zeros(W, dtype=bool)
    seg.numeric = xp.zeros(W, dtype=bool)
    seg.hyphen = xp.zeros(W, dtype=bool)
    if W > 1:
        gap = s[1:] - e[:-1]
        g0 = data[e[:-1]]
        digits = between(data[e[:-1] - 1], "0", "9") & between(data[s[1:]], "0", "9")
        one = gap == 1
        dot, comma, hyphen = g0 == ord("."), g0 == ord(","), g0 == ord("-")
        scheme = (gap == 3) & (g0 == ord(":")) & (data[e[:-1] + 1] == ord("/")) & (data[e[:-1] + 2] == ord("/"))
        seg.numeric[1:] = one & (dot | comma) & digits
        seg.hyphen[1:] = one & hyphen
        inner = dot | (g0 == ord("@")) | (g0 == ord("/")) | (g0 == ord("&"))
        joined[1:] = seg.hyphen[1:] | seg.numeric[1:] | (one & inner) | scheme
    first = ~joined  # a formula word starts there
    seg.starts = xp.flatnonzero(first)
    counted = xp.zeros(W + 1, dtype=xp.int64)
    counted[1:] = xp.cumsum(first, dtype=xp.int64)
    seg.group_bound = counted[word_bound]
    seg.opens = _opens(xp, tokens, word_bound, cased)
    return seg


def _opens(xp, tokens: words.Tokens, word_bound, cased):
    """Where a formula sentence opens: at each text's first word, and at the first word after
    each run of terminators that ends a sentence."""
    data, flags, s, e = tokens.data, tokens.flags, tokens.starts, tokens.ends
    W = int(s.size)
    opens = xp.zeros(W + 1, dtype=bool)
    at = xp.flatnonzero((flags & charclass.TERMINATOR) != 0)
    if at.size and W:
        run_start = xp.ones(int(at.size), dtype=bool)
        run_start[1:] = at[1:] != at[:-1] + 1
        first = xp.flatnonzero(run_start)
        rs = at[first]
        re = at[xp.concatenate([first[1:] - 1, xp.full(1, at.size - 1, dtype=first.dtype)])] + 1
        marks = data[at]
        loud = xp.zeros(int(at.size) + 1, dtype=xp.int64)
        loud[1:] = xp.cumsum((marks == ord("!")) | (marks == ord("?")), dtype=xp.int64)
        ends = xp.concatenate([first[1:], xp.full(1, at.size, dtype=first.dtype)])
        single = (re - rs == 1) & (data[rs] == ord("."))
        ellipsis = ~single & (loud[ends] == loud[first])
        # The word that ends where the run starts, and the first word after the run.
        j = xp.minimum(xp.searchsorted(e, rs), W - 1)
        before = e[j] == rs
        k = xp.minimum(xp.searchsorted(s, re), W - 1)
        after = s[k] >= re
        next_digit = after & between(data[s[k]], "0", "9")
        next_lower = after & between(cased[s[k]], "a", "z")
        head, length = tokens.head[j], tokens.lengths[j]
        letter = (length == 1) & between(data[s[j]], "a", "z")
        initial = letter & ((between(cased[s[j]], "A", "Z") & (data[s[j]] != ord("i"))) | (data[s[j] - 1] == ord(".")))
        abbreviation = _listed(xp, head, length, ALWAYS_HEADS) | (_listed(xp, head, length, NUMBER_HEADS) & next_digit)
        inside = ((flags[re] & charclass.WORD) != 0) | (before & (initial | abbreviation))
        keeps = (single & inside) | (ellipsis & next_lower)
        real = rs[xp.flatnonzero(~keeps)]
        opens[xp.searchsorted(s, real)] = True
    opens[word_bound[:-1]] = True  # (for an empty text: the next text's first word, marked anyway)
    return opens[:W]


def proper(tokens: words.Tokens, seg: Segments, cased):
    """Per formula word: capitalised (ASCII) and not opening a sentence."""
    at = tokens.starts[seg.starts]
    return between(cased[at], "A", "Z") & ~seg.opens[seg.starts]


def inflected(xp, tokens: words.Tokens, seg: Segments):
    """Per formula word: its last spec word ends in an -ed or -es that is a syllable of its
    own (`-ted`, `-ded`; `-ses`, `-xes`, `-zes`, `-ces`, `-ges`, `-ches`, `-shes`) and has
    at least 4 bytes (Gunning's exception where the word has 3 syllables)."""
    W = int(tokens.starts.size)
    last = xp.concatenate([seg.starts[1:], xp.full(1, W, dtype=seg.starts.dtype)]) - 1
    e, data = tokens.ends[last], tokens.data
    b1, b2, b3, b4 = (data[xp.maximum(e - i, 0)] for i in (1, 2, 3, 4))
    ed = (b1 == ord("d")) & (b2 == ord("e")) & ((b3 == ord("t")) | (b3 == ord("d")))
    sibilant = (b3 == ord("s")) | (b3 == ord("x")) | (b3 == ord("z")) | (b3 == ord("c")) | (b3 == ord("g"))
    sibilant |= (b3 == ord("h")) & ((b4 == ord("c")) | (b4 == ord("s")))
    es = (b1 == ord("s")) & (b2 == ord("e")) & sibilant
    return (ed | es) & (tokens.lengths[last] >= 4)


def latin_letters(xp, data, sep):
    """Per text: its Latin letters (ASCII letters, and U+00C0 to U+027F but for the signs
    U+00D7 and U+00F7: Latin-1's letters, Latin Extended-A and -B, IPA), counted on the
    buffer (every such letter is a word character)."""
    ascii_letter = between(data, "a", "z")  # (the buffer is lower-cased)
    lead = (data >= 0xC3) & (data <= 0xC9)
    lead[:-1] &= ~((data[:-1] == 0xC3) & ((data[1:] == 0x97) | (data[1:] == 0xB7)))
    total = xp.zeros(int(data.size) + 1, dtype=xp.int64)
    total[1:] = xp.cumsum(ascii_letter | lead, dtype=xp.int64)
    return xp.diff(total[sep])


#: Closed compounds: each part at least PART_MIN bytes, words up to COMPOUND_MAX bytes.
PART_MIN, COMPOUND_MAX = 3, 24
#: Words of the familiar list that end words without making them compounds (`comfortable`,
#: `passages`, `leadership`, `carefully`, `properties`): never a compound's second part.
COMPOUND_SUFFIXES = frozenset(
    {"able", "age", "ant", "ate", "fully", "hood", "ice", "ion", "less", "ship", "ten", "tie"}
)
#: The bits of `Formulas.packed`'s low half: can be a compound's first / second part.
FIRST_PART, SECOND_PART = 1, 2


def _spans(xp, ops, data, starts, lengths) -> words.Tokens:
    spans = words.Tokens()
    spans.data, spans.starts, spans.lengths = data, starts, lengths
    spans.ends = starts + lengths
    spans.head, spans.hashes = words.span_hashes(xp, ops, data, starts, lengths)
    return spans


def closed_compounds(xp, ops, tokens: words.Tokens, candidates, parts):
    """Per candidate spec word (indices; words of ASCII letters, 2 x PART_MIN to
    COMPOUND_MAX bytes): can it be cut in a first and a second part (`compound_parts`: `bookkeeper` =
    book + keeper)? `parts(spans)` gives the FIRST_PART / SECOND_PART bits of a Tokens of
    word parts (0 for other words)."""
    c = int(candidates.size)
    if c == 0:
        return xp.zeros(0, dtype=bool)
    lengths = tokens.lengths[candidates]
    cuts = lengths - 2 * PART_MIN + 1
    total = int(cuts.sum())
    offsets = xp.cumsum(cuts) - cuts
    owner = ops.repeat(xp.arange(c, dtype=xp.int64), cuts, total)
    k = PART_MIN + xp.arange(total, dtype=xp.int64) - offsets[owner]
    at = tokens.starts[candidates][owner]
    # The first parts; then the second parts of the cuts whose first part is one.
    easy = (parts(_spans(xp, ops, tokens.data, at, k)) & FIRST_PART) != 0
    cut = xp.flatnonzero(easy)
    if cut.size:
        second = parts(_spans(xp, ops, tokens.data, at[cut] + k[cut], lengths[owner[cut]] - k[cut]))
        easy[cut] = (second & SECOND_PART) != 0
    return ops.segment_sum(easy.astype(xp.int64), offsets) > 0
