"""Tools for people measuring and testing a served pipeline, never imported by the serving
code (the stub, the server, the front door, the repository, the client): load generation
(`load`: closed loops of clients, process memory), benchmarks (`bench`, behind
`readability-triton bench`), Triton's perf_analyzer (`perf`), the abusive and honest
clients of the abuse suite (`abuse`, `honest`), and launching `serve` on free ports
(`launch.launch_serve`). Importing this package imports none of its modules.
"""
