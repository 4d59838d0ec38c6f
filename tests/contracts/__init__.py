"""Contract suites: one mixin class per Protocol, holding the promises every implementation keeps.

Nothing here is collected on its own (no ``test_`` files, no ``Test`` classes). An implementation runs
a contract by subclassing it in its own test file, under the tier folder where it can run
(``tests/unit`` or ``tests/integration``), and providing the fixtures the mixin's docstring names;
that folder gives the inherited tests their marker. See tests/README.md.
"""
