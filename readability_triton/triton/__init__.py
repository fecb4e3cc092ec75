"""What touches Triton. Importing this package imports none of its modules.

Serving (what the Python models run): `runtime` (`PythonModel`: config, parameters,
device, artifacts, `execute`), `requests` (a batch from the requests of one execute),
`responses` (one pass, split back; request errors versus the server's), `admission` (the
entrance's load shedding).

Repositories: `profiles` (where each model runs), `configs` (each config.pbtxt as a
ModelConfig message), `repository` (assemble; what a served repository holds),
`releases` (what differs between Triton releases).

Running and watching a server: `server` (`TritonServer`), `installation` (the binary,
backends and environment), `processes` (/proc), `admin` (the restricted APIs' key),
`health` (the canary, probes and the supervisor).

Talking to one: `client` (`ReadabilityClient`, the tritonclient factory), `load` (closed
loops of clients), `bench` (the benchmark behind `readability-triton bench`).
"""
