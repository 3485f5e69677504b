"""Importing this module hangs (after starting a child process that must die with the agent)."""
from .crash import hang_forever

hang_forever()
