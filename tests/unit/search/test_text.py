from __future__ import annotations

from satellite.search.text import content_words, split_words, stem


def test_identifiers_split_into_words() -> None:
    # Given identifiers in the naming styles MCP servers use
    names = ["getUserByID", "slack_post-message", "v2.list/items"]
    # When splitting them
    words = [split_words(n) for n in names]
    # Then each becomes lowercase words
    assert words == [["get", "user", "by", "id"], ["slack", "post", "message"], ["v", "2", "list", "items"]]


def test_stop_words_are_dropped() -> None:
    # Given a sentence with stop words
    sentence = "Show me all of the files in my folder"
    # When extracting content words
    words = content_words(sentence)
    # Then only meaningful words remain
    assert words == ["show", "files", "folder"]


def test_inflections_share_a_stem() -> None:
    # Given inflected forms of the same words
    pairs = [("listing", "lists"), ("repositories", "repository"), ("created", "creates"), ("queries", "query")]
    # When stemming them
    stems = [(stem(a), stem(b)) for a, b in pairs]
    # Then each pair conflates
    assert all(a == b for a, b in stems)
