"""Imports a module that is not installed here (as MetaX code imports ``mcoplib``)."""
import mcoplib._C  # noqa: F401

attr = 1
