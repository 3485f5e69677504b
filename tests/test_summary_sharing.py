"""Summaries read from the cache folder share their line numbers and texts across files (pyindex's loaders)."""

import pickle

from attnlens.pyindex import summarize

SRC = "\n" * 300 + '''
import torch
from torch.nn import functional as F


def run(x: torch.Tensor, *, scale: float = 1.0, use_fp8: bool = False):
    if use_fp8:
        out = torch.ops._C.fp8_kernel(x, scale=scale, mode="fast")
    else:
        out = F.softmax(x, dim=-1)
    return out
'''


def _round_trip(text: str, path: str):
    s = summarize(text, path, "sha-" + path)
    return s, pickle.loads(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL))


def test_a_summary_read_back_equals_the_one_written():
    s, back = _round_trip(SRC, "/ws/a.py")
    assert back == s  # every field in its place (the loaders take the fields by position)
    f = back.functions["run"]
    assert [(p.name, p.kind, p.annotation) for p in f.params] == [
        ("x", "pos", "torch.Tensor"), ("scale", "kwonly", "float"), ("use_fp8", "kwonly", "bool")]
    fp8 = next(cs for cs in back.calls if cs.func == "torch.ops._C.fp8_kernel")
    assert (fp8.line, fp8.scope, fp8.kw_texts, fp8.assigned_to) == (308, "run", (("scale", "scale"), ("mode", "'fast'")), "out")
    assert [g[:2] for g in fp8.guards] == [("if", "use_fp8")]
    assert "torch" in f.names_read and "F" in f.names_read


def test_two_files_read_back_share_line_numbers_and_texts():
    _s1, a = _round_trip(SRC, "/ws/a.py")
    _s2, b = _round_trip(SRC.replace("def run", "def run2"), "/ws/b.py")
    ca = next(cs for cs in a.calls if cs.func == "torch.ops._C.fp8_kernel")
    cb = next(cs for cs in b.calls if cs.func == "torch.ops._C.fp8_kernel")
    assert ca.line == 308 and ca.line is cb.line and ca.end_line is cb.end_line and ca.fline is cb.fline
    assert ca.func is cb.func and ca.assigned_to is cb.assigned_to
    ba, bb = a.bindings["F"][0], b.bindings["F"][0]
    assert ba.line is bb.line and ba.target is bb.target and ba.attr is bb.attr
    fa, fb = a.functions["run"], b.functions["run2"]
    assert fa.line is fb.line and fa.end_line is fb.end_line
    assert all(x is y for x, y in zip(fa.names_read, fb.names_read)) and fa.names_read == fb.names_read
