"""Talking to a served ensemble. Importing this package imports none of its modules.

`readability` (`ReadabilityClient`, the tritonclient factory, output selection), `load`
(closed loops of clients), `bench` (the benchmark behind `readability-triton bench`).
"""
