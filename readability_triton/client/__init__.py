"""Talking to a served ensemble. Importing this package imports none of its modules.

`readability` (`ReadabilityClient`, the tritonclient factory, output selection). The tools
that measure a served ensemble (load, bench, perf_analyzer, the abuse suite) are in
`readability_triton.measure`.
"""
