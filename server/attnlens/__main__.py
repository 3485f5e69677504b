"""``python -m attnlens ...``: the same as the ``attnlens`` console script (used by editor clients)."""

from attnlens.cli import run

if __name__ == "__main__":
    run()
