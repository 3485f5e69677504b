"""Reads stdin while being imported (it must see /dev/null, not the agent's requests)."""
import sys

data = sys.stdin.read()
assert data == "", repr(data[:200])
