"""The strings the hot statements take in place of lists: a JSON document
of rows with JSON texts spliced in (``json_rows``), and array literals
(``array_literal``; tests/database/runtime/test_versions.py reads them back through
PostgreSQL's casts)."""

from __future__ import annotations

import json

from runqueue.sql import array_literal, json_rows


def test_json_rows_splice_texts_after_the_values_without_encoding_them_again() -> None:
    document = json_rows(
        [
            (["a", 1, None], ('{"x": [1, "é"]}', "null", "[]")),
            (['quote " and \\', 2.5], ()),
        ]
    )
    assert json.loads(document) == [
        ["a", 1, None, {"x": [1, "é"]}, None, []],
        ['quote " and \\', 2.5],
    ]
    assert json_rows([]) == "[]"


def test_array_literals_quote_every_text() -> None:
    assert array_literal(["a", 'b"c', "d\\e", "{,}"]) == '{"a","b\\"c","d\\\\e","{,}"}'
    assert array_literal([1, 20]) == "{1,20}"
    assert array_literal([]) == "{}"
