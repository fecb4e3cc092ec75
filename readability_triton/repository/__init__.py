"""Model repositories: what `assemble` writes. Importing this package imports none of its
modules.

`profiles` (where each model runs), `options` (`AssemblyOptions`: every choice that shapes
a repository), `configs` (each config.pbtxt as Triton's ModelConfig message), `releases`
(what differs between Triton releases), `canary` (the recorded answers serve's health check
compares with), `assemble` (a repository from an artifact set).
"""
