"""A plain per-text reading of docs/formulas.md's words and sentences ("Words and
sentences"), one code point at a time, for tests/test_formulas.py to hold the array code
against. Each word's own syllables, letters and familiarity come from `Formulas.counts` of
that word alone (those have their own tests); how words join, where sentences end and which
words are Gunning's complex words are written out here from the docs, sharing no code with
`features/formula_words.py` but the two abbreviation lists (data, not logic)."""

from __future__ import annotations

from readability_triton.features import formula_words, reference
from readability_triton.features import formulas as F

JOINS = {"-", ".", "@", "/", "&", "://"}


def spec_words(text: str) -> list[tuple[int, int]]:
    """(start, end) code point spans of the spec's words."""
    cps = [ord(c) for c in text]
    inside = [
        reference.is_wordchar(c)
        or (
            reference.is_apostrophe(c)
            and 0 < i < len(cps) - 1
            and reference.is_wordchar(cps[i - 1])
            and reference.is_wordchar(cps[i + 1])
        )
        for i, c in enumerate(cps)
    ]
    spans, start = [], None
    for i, flag in enumerate(inside + [False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _normal(text: str, span) -> str:
    return reference.normal_form(text[span[0] : span[1]])


def ends_sentence(text: str, spans, rs: int, re: int) -> bool:
    run = text[rs:re]
    after = [s for s in spans if s[0] >= re]
    nxt = text[after[0][0]] if after else ""
    if run != ".":
        return "!" in run or "?" in run or not ("a" <= nxt <= "z")
    if re < len(text) and reference.is_wordchar(ord(text[re])):
        return False
    before = [s for s in spans if s[1] == rs]
    if not before:
        return True
    word = _normal(text, before[0])
    first = text[before[0][0]]
    if len(word.encode()) == 1 and "a" <= word <= "z":
        if ("A" <= first <= "Z" and word != "i") or (before[0][0] > 0 and text[before[0][0] - 1] == "."):
            return False
    if word in formula_words.ABBREVIATIONS:
        return False
    return not (word in formula_words.BEFORE_NUMBERS and nxt.isascii() and nxt.isdigit())


def inflected(word: str) -> bool:
    if len(word.encode()) < 4:
        return False
    return word[-3:] in ("ted", "ded") or word.endswith(("ses", "xes", "zes", "ces", "ges", "ches", "shes"))


def counts(text: str, per_word: dict, compounds: tuple[set, set]) -> list[int]:
    """COUNTS of one text; `per_word[normal form]` = that word's COUNTS alone; `compounds`: the
    first and second parts of closed compounds."""
    spans = spec_words(text)
    latin = sum(c.isascii() and c.isalpha() or (0xC0 <= ord(c) <= 0x27F and ord(c) not in (0xD7, 0xF7)) for c in text)
    # Sentences: a word opens one after a run of terminators that ends one, or at the start.
    runs, i = [], 0
    while i < len(text):
        if reference.is_terminator(ord(text[i])):
            j = i
            while j < len(text) and reference.is_terminator(ord(text[j])):
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    real = [rs for rs, re in runs if ends_sentence(text, spans, rs, re)]
    opens = [k == 0 or any(spans[k - 1][1] <= rs < spans[k][0] for rs in real) for k in range(len(spans))]
    # Formula words.
    groups: list[list[int]] = []
    numeric = [False] * len(spans)
    hyphen = [False] * len(spans)
    for k, span in enumerate(spans):
        if k:
            gap = text[spans[k - 1][1] : span[0]]
            last, first = text[spans[k - 1][1] - 1], text[span[0]]
            digits = last.isascii() and last.isdigit() and first.isascii() and first.isdigit()
            numeric[k] = gap in (".", ",") and digits
            hyphen[k] = gap == "-"
            if gap in JOINS or numeric[k]:
                groups[-1].append(k)
                continue
        groups.append([k])
    out = [0] * len(F.COUNTS)
    out[F.LATIN] = latin
    out[F.SENTENCES] = sum(opens)
    for group in groups:
        parts = [per_word[_normal(text, spans[k])] for k in group]
        syllables = sum(p[F.SYLLABLES] for p in parts) - sum(numeric[k] for k in group)
        difficult = any(p[F.DIFFICULT] for p in parts)
        out[F.WORDS] += 1
        out[F.SYLLABLES] += syllables
        out[F.LETTERS] += sum(p[F.LETTERS] for p in parts)
        out[F.CHARACTERS] += sum(p[F.CHARACTERS] for p in parts)
        out[F.DIFFICULT] += difficult
        out[F.POLY] += syllables >= 3
        head = group[0]
        word = _normal(text, spans[head])
        proper = "A" <= text[spans[head][0]] <= "Z" and not opens[head]
        hyphenated = any(hyphen[k] for k in group) and not difficult
        made = syllables == 3 and inflected(_normal(text, spans[group[-1]]))  # made three syllables
        hard = syllables >= 3 and not proper and not made and not hyphenated
        if (
            hard
            and len(group) == 1
            and 2 * formula_words.PART_MIN <= len(word) <= formula_words.COMPOUND_MAX
            and word.isascii()
            and word.isalpha()
        ):
            first, second = compounds
            cut = range(formula_words.PART_MIN, len(word) - formula_words.PART_MIN + 1)
            hard = not any(word[:k] in first and word[k:] in second for k in cut)
        out[F.COMPLEX] += hard
    return out


def all_counts(model: F.Formulas, texts: list[str]) -> list[list[int]]:
    distinct = sorted({_normal(t, s) for t in texts for s in spec_words(t)})
    per_word = dict(zip(distinct, model.counts(distinct).tolist())) if distinct else {}
    # Compounds' parts: the list's own words of 3+ ASCII letters; second parts also their
    # inflections the model knows, but for the suffix-like words.
    listed = {
        w for w in F.spec_words(F.read_familiar()) if len(w) >= formula_words.PART_MIN and w.isascii() and w.isalpha()
    }
    forms = F.familiar_forms(sorted(listed - formula_words.COMPOUND_SUFFIXES), known=set(model.entries))
    second = {w for w in forms if len(w) >= formula_words.PART_MIN and w.isascii() and w.isalpha()}
    return [counts(t, per_word, (listed, second)) for t in texts]
