"""Fixture kernels for AttnLens probe tests (correct and deliberately broken).

Imported only inside the probe agent (the target interpreter), never by the
server.  Triton kernels here run on CPU under ``TRITON_INTERPRET=1``.
"""
