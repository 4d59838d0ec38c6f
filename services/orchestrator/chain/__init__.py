"""Chain-of-retrieval for multi-hop questions: beam search, next-hop sub-queries, evidence pairs (docs/chain.md)."""
