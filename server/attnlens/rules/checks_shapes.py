"""AL114: per-token tensors reshaped into a per-request shape without a visible uniformity guard."""

from __future__ import annotations

import re

from .api import Rule, check, rule

AL114 = rule(Rule(
    "AL114", "per-request-reshape", "warning",
    "A `view`/`reshape` of a per-token query/output tensor into `(num_requests, -1, ...)` with no visible "
    "uniform-query-length guard.",
    "Token-major tensors hold each request's query tokens back to back. `(num_reqs, -1, ...)` is only "
    "right when every request has the same query length (uniform MTP decode). Short prefills, zero-length "
    "padding or variable spec-decode lengths make the view mis-assign tokens to requests, or succeed by "
    "accident when the total happens to be divisible.",
    ("semantics", "shape"),
))

REQ_COUNT = re.compile(
    r"^(?:[\w.]*\.)?(num_reqs|num_requests|num_decodes|num_decode_reqs|num_decode_requests|num_prefills|"
    r"num_prefill_reqs|batch_size|bs|num_seqs|num_sequences|B)$"
)
PER_TOKEN = re.compile(
    r"^(q|qs|query|queries|o|out|output|outputs|attn_out|attn_output|k|key|v|value|hidden|hidden_states|x|"
    r"logits|tokens?|q_\w+|\w+_q|\w*query\w*|\w+_out|out_\w+|\w*output\w*|decode_\w+|prefill_\w+)$"
)
NOT_PER_TOKEN = re.compile(r"(block_table|seq_len|lens\b|slot|indptr|table|cu_seq|start_loc|positions|scale)")
_REQ = r"(num_reqs|num_requests|num_decodes|num_decode_reqs|num_decode_requests|batch_size|num_seqs|bs)"
UNIFORM = re.compile(
    r"uniform|min_query_len|max_query_len\s*==\s*[\w.]*min|query_lens?\b.*(==|\.all\(\)|torch\.all)|"
    r"%\s*\(?\s*[\w.]*" + _REQ + r"|" + _REQ + r"\s*\*|\*\s*[\w.]*" + _REQ + r"\b|"
    r"decode_query_len|q_len\s*==|query_len\s*==|num_tokens\s*==|shape\[0\]\s*==|numel\(\)\s*==|divisible"
)


def _guarded(ctx, sc) -> bool:
    for t in ctx.facts.tests:
        if t.scope != sc.scope:
            continue
        covers = t.body and t.body[0] <= sc.line <= t.body[1]
        if (t.line < sc.line or covers) and UNIFORM.search(t.text):
            return True
    return False


@check("AL114")
def per_request_reshape(ctx):
    for sc in ctx.facts.shapes:
        if len(sc.args) < 2:
            continue
        first, second = sc.args[0].replace(" ", ""), sc.args[1].replace(" ", "")
        if second != "-1" or not REQ_COUNT.match(first):
            continue
        root = sc.root or sc.receiver
        if not root or not PER_TOKEN.match(root) or NOT_PER_TOKEN.search(sc.receiver):
            continue
        if _guarded(ctx, sc):
            continue
        fn = sc.scope.rpartition(".")[2] or "this module"
        req = first.rpartition(".")[2]
        call = f"{sc.receiver}.{sc.method}({', '.join(sc.args)})"
        call = call if len(call) <= 60 else call[:57] + "..."
        msg = (f"`{call}` splits tokens per request ({req}, -1, ...) with no uniform-length check in {fn}: "
               f"variable-length requests get the wrong tokens. Assert uniform query lengths or bucket per token.")
        detail = (f"`{sc.receiver}.{sc.method}({', '.join(sc.args)})` turns a token-major tensor into a per-request shape. "
                  "That is only right if every request has the same number of query tokens; with a short, zero-length or "
                  "variable-length request the tokens are split across requests wrongly (silently when the total happens "
                  "to be divisible). Prove uniformity (assert on query_start_loc differences) or flatten/bucket by "
                  "per-token metadata.")
        ctx.add("AL114", sc.line, sc.col, sc.end_line, sc.end_col, msg, receiver=sc.receiver, request_dim=first,
                detail=detail)
