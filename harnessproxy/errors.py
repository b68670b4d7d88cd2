"""Errors a user can act on; the CLI prints their message, never a traceback."""


class ConfigError(Exception):
    """A user-facing configuration mistake."""
