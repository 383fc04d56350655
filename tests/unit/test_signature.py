from __future__ import annotations

from satellite.signature import render_signature


def test_required_parameters_come_first_and_optional_ones_are_marked() -> None:
    schema = {
        "type": "object",
        "properties": {
            "body": {"type": "string"},
            "repo": {"type": "string"},
            "title": {"type": "string"},
            "labels": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["repo", "title"],
    }
    assert render_signature("create_issue", schema) == (
        "create_issue(repo: string, title: string, body?: string, labels?: string[])"
    )


def test_enums_unions_and_missing_types_render_compactly() -> None:
    schema = {
        "properties": {
            "level": {"enum": ["error", "debug"]},
            "n": {"type": ["integer", "null"]},
            "x": {"anyOf": [{"type": "string"}, {"type": "number"}]},
            "y": {},
        },
        "required": ["level"],
    }
    assert (
        render_signature("f", schema) == "f(level: 'error' | 'debug', n?: integer | null, x?: string | number, y?: any)"
    )


def test_no_properties_renders_empty_parentheses() -> None:
    assert render_signature("get_env", {"type": "object"}) == "get_env()"
    assert render_signature("weird", {"properties": "nope"}) == "weird()"
