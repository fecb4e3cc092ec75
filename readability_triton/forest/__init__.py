"""The random forest on the readability features as it is served: `checkpoint` (Treelite
4.x, as FIL reads it), `runner` (`GTILRunner`: Treelite's GTIL on the CPU) and `arrays` (the
forest as arrays and `ArrayForestRunner`, the NumPy/CuPy tree walk). Training is
`readability_triton.training.forest`'s. Importing this package imports none of them.
"""
