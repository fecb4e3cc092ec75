"""Code that runs inside Triton's python-backend stub, beside the adapters in `backends/`.
Importing this package imports none of its modules.

`runtime` (`PythonModel`: config, parameters, device, artifacts, `execute`), `requests` (a
batch from the requests of one execute), `responses` (one pass, split back; request errors
versus the server's), `admission` (the entrance's load shedding, read off Triton's metrics).

Nothing here imports the server, repository or client packages: the stub runs with the
serving extras only.
"""
