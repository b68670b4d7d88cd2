"""harnessproxy: run unmodified agent CLIs in sandboxes, record every LLM call, score, and keep it all in DuckDB."""

__version__ = "0.1.0"
