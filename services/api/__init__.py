"""The public HTTP contract, shared by the gateway and the orchestrator: ``schemas.py``."""
