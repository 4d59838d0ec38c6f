"""Query routing: AdaptiveRAG's type and HyPA's complexity of a question (docs/routing.md)."""
