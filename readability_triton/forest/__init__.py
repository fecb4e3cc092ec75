"""The random forest on the readability features: `training` (scikit-learn, cross-
validation, the Treelite checkpoint written), `checkpoint` (Treelite 4.x, as FIL reads
it), `runner` (`GTILRunner`: Treelite's GTIL on the CPU) and `arrays` (the forest as
arrays and `ArrayForestRunner`, the NumPy/CuPy tree walk). Importing this package imports
none of them.
"""
