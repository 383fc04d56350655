"""Text normalisation shared by the lexical and the semantic rankers.

Tool names arrive as ``snake_case``, ``kebab-case``, ``dotted.names`` or ``camelCase``; queries arrive as free
English. Both are reduced to lowercase word tokens, and for the lexical ranker to Porter stems.
"""

from __future__ import annotations

import re
from functools import lru_cache

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[A-Za-z]+|[0-9]+")

STOP_WORDS = frozenset(
    """
    a about above after again all also am an and any are as at be been before being below between both but by
    can could did do does doing done down during each else etc few for from further get gets give go had has have
    having he her here hers him his how i if in into is it its itself just let lets like me might more most much
    must my myself need needs no nor not now of off on once only or other our ours out over own please same shall
    she should so some such than that the their theirs them then there these they this those through to too under
    until up us use using very want wants was we were what whats when where which while who whom why will with
    would you your yours
    """.split()
)


def split_words(text: str) -> list[str]:
    """Split free text or an identifier into lowercase words.

    Args:
        text: Any text, e.g. ``"getUserById"``, ``"slack_post-message"`` or a sentence.

    Returns:
        The lowercase words in order, e.g. ``["get", "user", "by", "id"]``.
    """
    return [w.lower() for w in _WORD.findall(_CAMEL_BOUNDARY.sub(" ", text))]


def content_words(text: str) -> list[str]:
    """Words of ``text`` that carry meaning: stop words and single letters removed."""
    return [w for w in split_words(text) if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]


# Porter (1980) stemmer. Written out here because the gateway must stay free of heavy NLP dependencies.
_VOWELS = frozenset("aeiou")


def _is_consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in _VOWELS:
        return False
    if ch == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    m = 0
    prev_vowel = False
    for i in range(len(stem)):
        vowel = not _is_consonant(stem, i)
        if prev_vowel and not vowel:
            m += 1
        prev_vowel = vowel
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _is_consonant(stem, i) for i in range(len(stem)))


def _ends_double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _is_consonant(word, len(word) - 1)


def _ends_cvc(word: str) -> bool:
    if len(word) < 3:
        return False
    return (
        _is_consonant(word, len(word) - 3)
        and not _is_consonant(word, len(word) - 2)
        and _is_consonant(word, len(word) - 1)
        and word[-1] not in "wxy"
    )


def _replace(word: str, suffixes: tuple[tuple[str, str], ...], min_measure: int) -> str:
    for suffix, replacement in suffixes:
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
            return stem + replacement if _measure(stem) > min_measure else word
    return word


_STEP2 = (
    ("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"), ("bli", "ble"),
    ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"), ("ization", "ize"), ("ation", "ate"),
    ("ator", "ate"), ("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous"), ("aliti", "al"),
    ("iviti", "ive"), ("biliti", "ble"), ("logi", "log"),
)  # fmt: skip
_STEP3 = (
    ("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""), ("ness", ""),
)  # fmt: skip
_STEP4 = (
    "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou", "ism", "ate",
    "iti", "ous", "ive", "ize",
)  # fmt: skip


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Porter stem of a lowercase word (``"listing"`` -> ``"list"``, ``"repositories"`` -> ``"repositori"``)."""
    if len(word) <= 2 or not word.isalpha():
        return word
    w = word
    # Step 1a: plurals.
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    # Step 1b: -ed / -ing.
    step1b_extra = False
    if w.endswith("eed"):
        if _measure(w[:-3]) > 0:
            w = w[:-1]
    elif w.endswith("ed") and _has_vowel(w[:-2]):
        w, step1b_extra = w[:-2], True
    elif w.endswith("ing") and _has_vowel(w[:-3]):
        w, step1b_extra = w[:-3], True
    if step1b_extra:
        if w.endswith(("at", "bl", "iz")):
            w += "e"
        elif _ends_double_consonant(w) and w[-1] not in "lsz":
            w = w[:-1]
        elif _measure(w) == 1 and _ends_cvc(w):
            w += "e"
    # Step 1c: y -> i.
    if w.endswith("y") and _has_vowel(w[:-1]):
        w = w[:-1] + "i"
    w = _replace(w, _STEP2, 0)
    w = _replace(w, _STEP3, 0)
    # Step 4: drop a suffix from a long enough stem.
    for suffix in _STEP4:
        if w.endswith(suffix):
            s = w[: len(w) - len(suffix)]
            if _measure(s) > 1 and (suffix != "ion" or s.endswith(("s", "t"))):
                w = s
            break
    # Step 5: final -e and -ll.
    if w.endswith("e"):
        s = w[:-1]
        m = _measure(s)
        if m > 1 or (m == 1 and not _ends_cvc(s)):
            w = s
    if w.endswith("ll") and _measure(w) > 1:
        w = w[:-1]
    return w
