"""harnessproxy: run unmodified agent CLIs in sandboxes, record every LLM call, score, keep it in DuckDB."""

__version__ = "0.1.0"
