"""The rules' comment scanner agrees with the tokenizer, and the shared parse is safe."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

from attnlens.pyindex import parse_module, summarize
from attnlens.rules.facts import collect, scan_comments

from .conftest import MINI


def _tokenize_comments(text: str) -> list[tuple[int, int, str]]:
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.start[1], tok.string[1:]))
    return out


TRICKY = '''\
x = "# not a comment"  # a comment
y = 'it''s' # two strings then a comment
s = """
# inside a triple-quoted string
\\""" still inside
"""  # after the string
r = r"\\"# still in the raw string"  # real
t = f"{x!r}#" '#' "\\\\"  # after escapes
u = b'\\'' + rb"\\\\" # bytes
v = (1,  # in parentheses
     2)
w = \\
    3  # after a continuation
'''


def test_scan_comments_tricky_cases():
    assert scan_comments(TRICKY) == _tokenize_comments(TRICKY)
    assert [c[2] for c in scan_comments(TRICKY)] == [
        " a comment", " two strings then a comment", " after the string", " real", " after escapes", " bytes",
        " in parentheses", " after a continuation"]
    assert scan_comments("x = 1\n") == []
    assert scan_comments("# first\r\nx = 1  # crlf\r\n") == [(1, 0, " first"), (2, 7, " crlf")]
    assert scan_comments("é = 'ü'  # non-ascii column\n") == [(1, 9, " non-ascii column")]


def _python_files():
    import importlib.util

    spec = importlib.util.find_spec("vllm")  # located, not imported (vllm's __init__ needs torch)
    assert spec is not None and spec.submodule_search_locations, "the test environment installs vllm"
    pkg = Path(list(spec.submodule_search_locations)[0])
    roots = [pkg / "v1" / "attention", pkg / "attention", MINI]
    for root in roots:
        yield from sorted(root.rglob("*.py"))


def test_scan_comments_equals_tokenize_on_real_sources():
    files = list(_python_files())
    assert len(files) > 40
    checked = 0
    for p in files:
        text = p.read_text(encoding="utf-8")
        try:
            expected = _tokenize_comments(text)
        except (tokenize.TokenError, SyntaxError):
            continue
        assert scan_comments(text) == expected, p
        checked += 1
    assert checked > 40


def test_parse_is_shared_and_not_mutated():
    text = "def f(x):\n    return x.view(2, -1)  # a comment\n"
    t1 = parse_module(text)
    assert parse_module(text) is t1  # the index summary and the rule facts share one parse
    before = [type(n).__name__ for n in __import__("ast").walk(t1)]
    s = summarize(text, "m.py", "sha")
    facts = collect(text)
    assert [type(n).__name__ for n in __import__("ast").walk(t1)] == before
    assert "f" in s.functions and facts.shapes and facts.comments[0].text == "a comment"
    parse_module("a = 1\n")
    parse_module("b = 2\n")
    assert parse_module(text) is not t1  # a bounded memo: older texts are parsed again
    # a syntax error blanks the broken statement (pyrecover); only an unrecoverable text raises
    assert [type(n).__name__ for n in parse_module("def (:\n").body] == ["Pass"]
    with pytest.raises(SyntaxError):
        parse_module("".join(f"print 'line {i}'\n" for i in range(40)))  # more broken statements than MAX_ROUNDS
