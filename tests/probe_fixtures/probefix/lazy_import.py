"""A wrapper that imports its backend lazily, inside the call (as vLLM's merge_attn_states does)."""


def merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None):
    from mcoplib import _C  # noqa: F401 - not installed here

    raise AssertionError("unreachable")
