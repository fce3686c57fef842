"""Golden plan snapshots: the rendered summaries (summary.py), their text files and update.py."""
