"""Search benchmark: latency at 100 / 1,000 / 10,000 tools and ranking quality on the dev queries."""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from satellite.search import SearchDocument, SearchIndex, embed_document

BENCH = Path(__file__).resolve().parents[3] / "shared" / "bench"
SIZES = ((100, "", ""), (1_000, "<= 0.5 ms", ""), (10_000, "<= 2 ms", ""))
TARGETS = {"Recall@5": ">= 0.85", "MRR@10": ">= 0.80"}
LATENCY_ROUNDS = 3


def _load(name: str) -> list[dict[str, Any]]:
    with (BENCH / name).open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _document(tool: dict[str, Any], suffix: str = "") -> SearchDocument:
    server = f"{tool['server']}{suffix}"
    schema = tool.get("inputSchema")
    return SearchDocument(f"{server}:{tool['name']}", server, tool["name"], tool.get("description") or "", schema or {})


def _catalog(tools: list[dict[str, Any]], size: int) -> list[SearchDocument]:
    # Larger catalogs repeat the real tools under renamed servers (github -> github-7), as a gateway would see.
    docs: list[SearchDocument] = []
    copy = 0
    while len(docs) < size:
        suffix = "" if copy == 0 else f"-{copy}"
        docs.extend(_document(t, suffix) for t in tools[: size - len(docs)])
        copy += 1
    return docs


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _latency_rows(tools: list[dict[str, Any]], queries: list[str]) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for size, p50_target, p95_target in SIZES:
        docs = _catalog(tools, size)
        # Discovery computes embeddings once; the index build measured here is what a cold gateway does.
        stored = [
            SearchDocument(d.path, d.server, d.name, d.description, d.input_schema, embed_document(d)) for d in docs
        ]
        started = time.perf_counter()
        index = SearchIndex.build(stored)
        build_ms = (time.perf_counter() - started) * 1000
        for query in queries:
            index.search(query, 10)
        samples: list[float] = []
        for _ in range(LATENCY_ROUNDS):
            for query in queries:
                t0 = time.perf_counter()
                index.search(query, 10)
                samples.append((time.perf_counter() - t0) * 1000)
        rows.append((f"search p50 @ {size} tools (ms)", f"{statistics.median(samples):.3f}", p50_target))
        rows.append((f"search p95 @ {size} tools (ms)", f"{_percentile(samples, 0.95):.3f}", p95_target))
        rows.append((f"index build @ {size} tools, stored embeddings (ms)", f"{build_ms:.0f}", ""))
    return rows


def _quality_rows(tools: list[dict[str, Any]], labelled: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    index = SearchIndex.build([_document(t) for t in tools])
    per_kind: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for item in labelled:
        ranked = [hit.path for hit in index.search(item["q"], 10)]
        relevant = set(item["relevant"])
        recall1 = len(relevant & set(ranked[:1])) / 1
        recall5 = len(relevant & set(ranked[:5])) / min(5, len(relevant))
        mrr = next((1.0 / rank for rank, path in enumerate(ranked, start=1) if path in relevant), 0.0)
        for kind in ("all", item["kind"]):
            per_kind[kind].append((recall1, recall5, mrr))
    rows: list[tuple[str, str, str]] = []
    for kind in ["all", *sorted(k for k in per_kind if k != "all")]:
        results = per_kind[kind]
        for position, measure in enumerate(("Recall@1", "Recall@5", "MRR@10")):
            value = statistics.mean(r[position] for r in results)
            target = TARGETS.get(measure, "") if kind == "all" else ""
            rows.append((f"{measure} {kind} (n={len(results)})", f"{value:.3f}", target))
    return rows


def run() -> list[tuple[str, str, str]]:
    """Measure search latency and dev-query quality.

    Returns:
        Rows of (measure, value, target); target is "" where none is set.
    """
    tools = _load("tools.jsonl")
    labelled = _load("queries_dev.jsonl")
    return _quality_rows(tools, labelled) + _latency_rows(tools, [item["q"] for item in labelled])
