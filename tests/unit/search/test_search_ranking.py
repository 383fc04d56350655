from __future__ import annotations

from satellite.search import SearchDocument, SearchIndex, embed_document, is_meaningful_query
from satellite.search.embedding import EMBEDDING_BYTES


def _doc(server: str, name: str, description: str, params: tuple[str, ...] = ()) -> SearchDocument:
    schema = {"type": "object", "properties": {p: {"type": "string"} for p in params}}
    return SearchDocument(f"{server}:{name}", server, name, description, schema)


CATALOG = [
    _doc("slack", "slack_get_channel_history", "Get recent messages from a channel", ("channel_id", "limit")),
    _doc("slack", "slack_post_message", "Post a new message to a Slack channel", ("channel_id", "text")),
    _doc("google-maps", "maps_elevation", "Get the elevation for locations on the earth", ("locations",)),
    _doc("google-maps", "maps_geocode", "Convert an address into geographic coordinates", ("address",)),
    _doc("puppeteer", "puppeteer_screenshot", "Take a screenshot of the current page or an element", ("name",)),
    _doc("filesystem", "read_text_file", "Read the complete contents of a file as text", ("path", "head", "tail")),
    _doc("filesystem", "write_file", "Create a new file or overwrite an existing file", ("path", "content")),
    _doc(
        "redis", "set", "Set a Redis string value with an optional expiration time", ("key", "value", "expireSeconds")
    ),
    _doc("github", "create_pull_request", "Create a new pull request in a GitHub repository", ("owner", "repo")),
    _doc("sequential-thinking", "sequentialthinking", "A tool for dynamic and reflective problem-solving", ()),
]


def _paths(index: SearchIndex, query: str, limit: int = 3) -> list[str]:
    return [hit.path for hit in index.search(query, limit)]


def test_exact_words_of_a_tool_name_rank_it_first() -> None:
    # Given an index over a small catalog
    index = SearchIndex.build(CATALOG)
    # When searching with the tool's own words
    top = _paths(index, "post message to slack")
    # Then that tool comes first
    assert top[0] == "slack:slack_post_message"


def test_misspelt_query_still_finds_the_tool() -> None:
    # Given an index over a small catalog
    index = SearchIndex.build(CATALOG)
    # When the query misspells every word
    top = _paths(index, "slak chanel histroy")
    # Then the intended tool still ranks first
    assert top[0] == "slack:slack_get_channel_history"


def test_glued_tool_name_matches_separate_misspelt_words() -> None:
    # Given a tool whose name glues two words together
    index = SearchIndex.build(CATALOG)
    # When the query spells them apart, with typos
    top = _paths(index, "sequental thinkng")
    # Then the glued tool is found
    assert top[0] == "sequential-thinking:sequentialthinking"


def test_word_order_does_not_change_the_best_hit() -> None:
    # Given an index over a small catalog
    index = SearchIndex.build(CATALOG)
    # When the same words are given in two orders
    forward = _paths(index, "elevation maps", 1)
    backward = _paths(index, "maps elevation", 1)
    # Then both find the same tool
    assert forward == backward == ["google-maps:maps_elevation"]


def test_parameter_names_are_searchable() -> None:
    # Given a tool whose only mention of expiry is its parameter name expireSeconds
    docs = [_doc("cache", "put", "Store a value", ("key", "value", "expireSeconds")), _doc("cache", "get", "Read")]
    index = SearchIndex.build(docs)
    # When searching for the parameter's words
    top = _paths(index, "expire seconds", 1)
    # Then the tool with that parameter ranks first
    assert top == ["cache:put"]


def test_server_name_finds_the_servers_tools() -> None:
    # Given a catalog with two Slack tools
    index = SearchIndex.build(CATALOG)
    # When the query names only the service
    top = _paths(index, "slack", 2)
    # Then both Slack tools come first
    assert set(top) == {"slack:slack_get_channel_history", "slack:slack_post_message"}


def test_paraphrase_without_shared_words_finds_the_tool() -> None:
    # Given a catalog with a screenshot tool
    index = SearchIndex.build(CATALOG)
    # When the query describes the task in other words
    top = _paths(index, "capture an image of the web page")
    # Then the screenshot tool is among the first three
    assert "puppeteer:puppeteer_screenshot" in top


def test_scores_are_in_unit_interval_and_descending() -> None:
    # Given an index over a small catalog
    index = SearchIndex.build(CATALOG)
    # When searching with a broad query
    hits = index.search("create a new file in the repository", 10)
    # Then scores lie in [0, 1], are sorted best first, and the limit is respected
    scores = [hit.score for hit in hits]
    assert hits
    assert len(hits) <= 10
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)


def test_limit_caps_the_number_of_hits() -> None:
    # Given an index over ten tools
    index = SearchIndex.build(CATALOG)
    # When asking for two hits
    hits = index.search("file", 2)
    # Then exactly two come back
    assert len(hits) == 2


def test_meaningless_queries_return_nothing() -> None:
    # Given an index over a small catalog
    index = SearchIndex.build(CATALOG)
    # When the query is empty, blank, punctuation or a lone stop word
    queries = ["", "   ", "???", "the"]
    # Then none is meaningful and search returns no hit
    for query in queries:
        assert not is_meaningful_query(query)
        assert index.search(query, 5) == []


def test_real_words_are_meaningful() -> None:
    # Given a short query with one content word
    query = "screenshot"
    # When checking it
    meaningful = is_meaningful_query(query)
    # Then it is meaningful
    assert meaningful


def test_precomputed_embedding_gives_the_same_ranking() -> None:
    # Given the catalog with embeddings computed once, as discovery does
    with_embeddings = [
        SearchDocument(d.path, d.server, d.name, d.description, d.input_schema, embed_document(d)) for d in CATALOG
    ]
    # When both catalogs are indexed and searched
    plain = SearchIndex.build(CATALOG).search("read a text file", 5)
    stored = SearchIndex.build(with_embeddings).search("read a text file", 5)
    # Then every stored embedding has the documented size and the rankings agree
    assert all(d.embedding is not None and len(d.embedding) == EMBEDDING_BYTES for d in with_embeddings)
    assert [h.path for h in plain] == [h.path for h in stored]


def test_empty_index_has_no_hits() -> None:
    # Given an index over no tools
    index = SearchIndex.build([])
    # When searching
    hits = index.search("anything at all", 5)
    # Then there are no hits and the index is empty
    assert hits == []
    assert len(index) == 0
