"""Conversations: per-principal sessions, their fact graph, and self-contained follow-ups."""
