"""Brains turn findings into single-factor proposals: ``heuristic`` (default, offline) or ``llm``."""
