"""The adaptive pipeline (docs/orchestration.md), one sub-package per part.

- ``routing``: which kind of question this is and how hard (router + its features);
- ``conversation``: sessions, their fact graph, and the rewrite of follow-ups;
- ``chain``: chain-of-retrieval for multi-hop questions (beam, sub-queries, evidence pairs);
- ``corrective``: CRAG (grading, refinement, the secondary source);
- ``serving``: the pipeline's one entry point, its wire messages, HTTP face and Ray Serve app.

At the top sit what ties them together: :mod:`.search` (one search), :mod:`.orchestrator` (one
request through every part), :mod:`.answer`, :mod:`.plan` (the types the parts share),
:mod:`.assemble` (the one place the parts are built from settings) and :mod:`.runtime`.
"""
