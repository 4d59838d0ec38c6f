"""CRAG's corrective retrieval: grade the retrieved set, refine it, or search a secondary source (docs/grading.md)."""
