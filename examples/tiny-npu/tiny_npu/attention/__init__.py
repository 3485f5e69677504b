# SPDX-License-Identifier: Apache-2.0
"""Attention backends: paged, sink, mla, sparse_mla (selected by the platform) and custom."""
