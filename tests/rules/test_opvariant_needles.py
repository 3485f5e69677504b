"""The op-variant scans ask whether a workspace file spells ``torch.ops.NS.OP`` for each op they pair: answered from
one scan per file of its ``torch.ops.`` references (``opvariants._ops_refs``), equal to the substring test."""

from __future__ import annotations

from attnlens.rules import opvariants as OV
from tests.helpers import file_reads, fixture_ws

TEXTS = [
    "",
    "x = 1\n",
    "torch.ops._C.rms_norm(out, x)\n",
    "y = torch.ops._C.rms_norm_fused(out)  # torch.ops.vllm.unified_attention\n",
    "f = torch.ops._C\nf.rms_norm(x)\n",  # the namespace only
    "a=xtorch.ops._C.rms_norm;b=torch.ops.torch.ops._C.rms_norm\n",  # preceded by a word character; nested
    "torch.ops.\ntorch.ops._moe_C .topk(x)\n",  # a prefix that ends at once; a space inside
    "s = 'torch.ops._C.rms_norm'\n",  # in a string: still a substring
    "torch.ops._C.rms_norm\u2192x\n",  # a non-ASCII character ends the run
]
NEEDLES = ["torch.ops._C.rms_norm", "torch.ops._C.rms_norm_fused", "torch.ops.vllm.unified_attention", "torch.ops._C",
           "torch.ops._moe_C.topk", "torch.ops._moe_C", "torch.ops.torch.ops._C.rms_norm", "torch.ops._C.rms"]


def test_the_references_answer_every_needle_as_the_substring_test_does():
    for text in TEXTS:
        refs = OV._ops_refs(text)
        for needle in NEEDLES:
            assert any(r.startswith(needle) for r in refs) == (needle in text), (text, needle)
    assert OV._ops_refs(TEXTS[3]) == ("torch.ops._C.rms_norm_fused", "torch.ops.vllm.unified_attention")
    assert OV._ops_refs(TEXTS[6]) == ("torch.ops.", "torch.ops._moe_C")


def test_a_workspace_scan_reads_each_file_once_for_every_op(tmp_path, monkeypatch):
    ws = fixture_ws(tmp_path, {
        "p/__init__.py": "",
        "p/a.py": "import torch\n\ndef f(x):\n    return torch.ops._C.rms_norm(x)\n",
        "p/b.py": "import torch\n\ndef g(x):\n    return torch.ops.vllm.unified_attention(x)\n",
        "p/c.py": "def h():\n    return 'no ops here'\n",
    })
    idx = ws.index
    idx.TEXT_MEMO_CHARS = 0  # (no text kept: every text asked is a read of the file)
    reads = file_reads(monkeypatch)
    found = {n: [m.name for m, _t in OV._ws_modules_with(idx, n)] for n in
             ("torch.ops._C.rms_norm", "torch.ops.vllm.unified_attention", "torch.ops._C.silu", "torch.ops._C")}
    assert found == {"torch.ops._C.rms_norm": ["p.a"], "torch.ops.vllm.unified_attention": ["p.b"],
                     "torch.ops._C.silu": [], "torch.ops._C": ["p.a"]}
    # each of the 4 files read once for its references (the 4 needles), then the 3 matches' texts for the caller
    # and the 2 matching modules' summaries (the substring test per needle read every file for each: 16 + 3 + 2)
    assert len(reads) == 4 + 3 + 2
