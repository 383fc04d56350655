"""BERT's uncased WordPiece tokenizer, enough of it to map words to vocabulary ids."""

from __future__ import annotations

import unicodedata
from functools import lru_cache

MAX_WORD_CHARS = 100


class WordPiece:
    """Greedy longest-match-first WordPiece over a BERT ``vocab.txt`` (one token a line, id = line number)."""

    def __init__(self, tokens: list[str], unknown: str = "[UNK]") -> None:
        self._ids = {token: i for i, token in enumerate(tokens)}
        self._unknown = self._ids[unknown]
        self.word_ids = lru_cache(maxsize=65536)(self._word_ids)

    def __len__(self) -> int:
        return len(self._ids)

    def token_id(self, token: str) -> int | None:
        """Id of a vocabulary token, None if absent."""
        return self._ids.get(token)

    def _word_ids(self, word: str) -> tuple[int, ...]:
        if len(word) > MAX_WORD_CHARS:
            return (self._unknown,)
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found: int | None = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = self._ids.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return (self._unknown,)
            ids.append(found)
            start = end
        return tuple(ids)

    def ids(self, text: str) -> list[int]:
        """Vocabulary ids of ``text``: lowercased, accents stripped, split on spaces and punctuation."""
        normalized = "".join(
            ch for ch in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(ch) != "Mn"
        )
        out: list[int] = []
        word: list[str] = []
        for ch in normalized:
            if ch.isspace() or _is_punctuation(ch):
                if word:
                    out.extend(self.word_ids("".join(word)))
                    word = []
                if not ch.isspace():
                    out.extend(self.word_ids(ch))
            else:
                word.append(ch)
        if word:
            out.extend(self.word_ids("".join(word)))
        return out


def _is_punctuation(ch: str) -> bool:
    code = ord(ch)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(ch).startswith("P")
