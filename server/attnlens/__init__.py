"""AttnLens: see the code that really runs behind vLLM plugin attention code."""
__version__ = "0.1.0"
