"""Request trace reconstruction from spans without trace identifiers (TraceWeaver and baselines)."""
