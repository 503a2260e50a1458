"""Compose tasks: one compose project per rollout (placeholder, filled below)."""
