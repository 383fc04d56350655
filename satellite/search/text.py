"""Text normalisation shared by the lexical and the semantic rankers.

Tool names arrive as ``snake_case``, ``kebab-case``, ``dotted.names`` or ``camelCase``; queries arrive as free
English. Both are reduced to lowercase word tokens, and for the lexical ranker to Snowball English stems (PyStemmer).
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

import Stemmer  # type: ignore[import-not-found]  # compiled extension, ships no type stubs

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


# One stemmer per thread: a PyStemmer instance keeps internal state and must not be shared between threads.
_local = threading.local()


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Snowball English (Porter2) stem of a lowercase word, e.g. ``"listing"`` -> ``"list"``."""
    if len(word) <= 2 or not word.isalpha():
        return word
    stemmer: Stemmer.Stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = Stemmer.Stemmer("english", 0)
        _local.stemmer = stemmer
    result: str = stemmer.stemWord(word)
    return result
