from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

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


def test_stems_are_snowball_english() -> None:
    # Given words where Snowball English (Porter2) differs from the original Porter algorithm
    words = ["generously", "fairly", "dying"]
    # When stemming them
    stems = [stem(w) for w in words]
    # Then they get Porter2 stems
    assert stems == ["generous", "fair", "die"]


def test_identifiers_and_numbers_are_not_stemmed() -> None:
    # Given tokens that are not plain words
    tokens = ["2024", "s3", "is"]
    # When stemming them
    stems = [stem(t) for t in tokens]
    # Then they are returned unchanged
    assert stems == tokens


def test_stemming_from_many_threads_agrees() -> None:
    # Given many distinct words stemmed concurrently (each thread has its own stemmer)
    words = [f"{w}{suffix}" for w in ("connect", "list", "creat", "delet") for suffix in ("ing", "ed", "ions", "s")]
    stem.cache_clear()
    # When stemming them on several threads
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(stem, words * 20))
    # Then each word gets the same stem as a single-threaded run
    stem.cache_clear()
    assert concurrent == [stem(w) for w in words] * 20
