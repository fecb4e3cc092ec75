"""A corpus the project generates itself, for a demo without data: texts of clearly varying
difficulty (short sentences of everyday words ... long sentences of Latinate words) and
targets from a formula (Flesch reading ease mapped onto CommonLit's scale). Scores of a
demo built on it are illustrative, not CommonLit-calibrated.
"""

from __future__ import annotations

import os
import random
import re

from .data import COMMONLIT_CSV, read_table
from .errors import DemoError

CORPUS_VERSION = 2
DEFAULT_CORPUS_SIZE = 600

_EASY = {
    "noun": "cat dog sun ball tree boy girl mom dad bird fish hat cake bed car home day friend book toy cup park "
    "game milk rain farm duck pig cow hen box bus door hill pond ship star bell coat shoe egg frog kite "
    "lamp nest road sock swing town wall yard apple bread horse river snow".split(),
    "verb": "saw had got ate hid met fed liked found made took fixed kept held lost sold washed kicked pulled "
    "pushed helped fed carried painted dropped opened closed climbed hugged packed".split(),
    "adj": "big red small happy old new hot wet sad good soft fast tall little warm cold blue green funny "
    "kind shy loud quiet clean dirty brown pink busy lazy".split(),
    "link": "and but so then".split(),
}
_MEDIUM = {
    "noun": "village garden teacher window kitchen blanket mountain captain library journey neighbor "
    "festival message picture station country machine problem science history lesson harvest "
    "market weather answer ocean castle island forest doctor".split(),
    "verb": "remembered discovered returned followed gathered explained imagined noticed delivered "
    "finished visited answered borrowed repaired watered protected collected prepared "
    "described measured".split(),
    "adj": "careful curious gentle ancient famous nervous patient narrow crowded silent wooden golden "
    "distant honest clever enormous peaceful serious modern simple".split(),
    "link": "because although while since".split(),
}
_HARD = {
    "noun": "phenomenon infrastructure jurisprudence epistemology administration hypothesis consequence "
    "configuration methodology equilibrium constituency legislation circumstance paradigm deterioration "
    "accountability bureaucracy interpretation manifestation predisposition reconciliation sovereignty "
    "stratification legitimacy dissemination juxtaposition proliferation ramification susceptibility "
    "preponderance deliberation exacerbation idiosyncrasy implementation heterogeneity "
    "conceptualization amelioration categorization jurisdiction".split(),
    "verb": "necessitated substantiated exacerbated precipitated circumscribed ameliorated promulgated "
    "corroborated undermined reconceptualized institutionalized delineated extrapolated "
    "characterized contextualized operationalized disseminated consolidated perpetuated "
    "differentiated".split(),
    "adj": "unprecedented indispensable heterogeneous multifaceted contemporaneous idiosyncratic "
    "incontrovertible quintessential disproportionate epistemological comprehensive "
    "institutional hypothetical inexorable circumstantial philosophical conventional "
    "administrative ostensible ubiquitous".split(),
    "link": "notwithstanding consequently whereas nevertheless furthermore".split(),
}


def _syllables(word: str) -> int:
    word = word.lower().strip("'")
    groups = re.findall(r"[aeiouy]+", word)
    count = len(groups)
    if word.endswith("e") and not word.endswith(("le", "ee")) and count > 1:
        count -= 1
    return max(count, 1)


def reading_ease(text: str) -> float:
    """Flesch reading ease of `text` (words: letter runs; sentences: `.!?` pieces)."""
    words = re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)?", text)
    sentences = [s for s in re.split(r"[.!?]+", text) if re.search(r"[A-Za-z]", s)]
    if not words or not sentences:
        return 0.0
    syllables = sum(_syllables(w) for w in words)
    return 206.835 - 1.015 * len(words) / len(sentences) - 84.6 * syllables / len(words)


def corpus_target(text: str) -> float:
    """The generated corpus' target: Flesch reading ease mapped onto CommonLit's scale,
    `(FRE - 55) / 40` (the easiest texts about +1.4, the hardest about -4.3)."""
    return round((reading_ease(text) - 55.0) / 40.0, 4)


def _sentence_length(rng: random.Random, difficulty: float) -> int:
    return max(4, int(round(5 + 22 * difficulty + rng.uniform(-3, 3))))


def _sentence(rng: random.Random, difficulty: float, length: int) -> str:
    p_hard = 0.03 + 0.9 * difficulty
    p_medium = 0.5 * (1.0 - abs(2.0 * difficulty - 1.0))

    def word(kind: str) -> str:
        draw = rng.random()
        tier = _HARD if draw < p_hard else _MEDIUM if draw < p_hard + p_medium else _EASY
        return rng.choice(tier[kind])

    def article(noun: str) -> str:
        return "an" if noun[0] in "aeiou" else "a"

    parts = ["the", word("adj"), word("noun"), word("verb"), "the", word("noun")]
    while len(parts) < length:
        noun = word("noun")
        parts += [",", word("link"), "the", word("adj"), word("noun"), word("verb"), article(noun), noun]
    text = " ".join(parts).replace(" ,", ",")
    end = "." if difficulty > 0.3 or rng.random() < 0.7 else rng.choice("!?")
    return text[0].upper() + text[1:] + end


def generate_corpus(n_texts: int = DEFAULT_CORPUS_SIZE, seed: int = 0) -> tuple[list[str], list[float]]:
    """`n_texts` deterministic texts of clearly varying difficulty (short sentences of
    everyday words ... long sentences of Latinate words), of 10 to about 180 words
    whatever their difficulty, and their `corpus_target`s."""
    if n_texts < 2:
        raise DemoError(f"the generated corpus needs at least 2 texts, got {n_texts}")
    rng = random.Random(f"readability-triton corpus {CORPUS_VERSION} {seed}")
    texts, targets = [], []
    for i in range(n_texts):
        difficulty = (i + rng.random()) / n_texts
        # text length independent of difficulty: the number of words does not give the answer away
        words = rng.randint(10, 160)
        sentences: list[str] = []
        while not sentences or sum(len(x.split()) for x in sentences) < words:
            sentences.append(_sentence(rng, difficulty, _sentence_length(rng, difficulty)))
        text = " ".join(sentences)
        texts.append(text)
        targets.append(corpus_target(text))
    order = list(range(n_texts))
    rng.shuffle(order)
    return [texts[i] for i in order], [targets[i] for i in order]


def default_texts(n: int | None = None) -> tuple[list[str], str]:
    """The texts the tools use when none are given: the shared CommonLit excerpts where
    they are (`data.COMMONLIT_CSV`), else `n` (default 400) generated ones; and which they
    are, in words."""
    if os.path.isfile(COMMONLIT_CSV):
        texts = read_table(COMMONLIT_CSV).texts
        return (texts[:n] if n else texts), f"the CommonLit excerpts ({os.path.normpath(COMMONLIT_CSV)})"
    return generate_corpus(n or 400)[0], "a generated corpus (no CommonLit data here)"


#: Where a text's first sentence ends: ., ! or ? (and any closing quote or bracket) before a space.
_SENTENCE_END = re.compile(r"""[.!?]["'”’)\]]*(?=\s)""")


def first_sentences(texts) -> list[str]:
    """Each text's first sentence (the text itself where it has one sentence): short texts of
    the same vocabulary, for `bench --short` and the bucket benchmarks (the CommonLit
    excerpts' first sentences average 29 BERT tokens, their excerpts 217)."""
    out = []
    for text in texts:
        stripped = text.strip()
        end = _SENTENCE_END.search(stripped)
        out.append(stripped[: end.end()] if end else stripped)
    return out
