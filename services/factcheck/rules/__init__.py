"""The fact-check's rules, one function each, grouped by the rule of docs/factcheck.md they belong to.

:mod:`~services.factcheck.rules.check` holds what every rule reads (the check's passages, their
evidence, the set-level matrices) and writes (the verdicts so far). :mod:`.adversarial` is rule 1,
:mod:`.relevance` rules 2 and 4 (and the LLM judge that replaces rules 2-4), :mod:`.consensus` rule 3.
:func:`services.factcheck.classifier.decide` applies them in their documented order.
"""
