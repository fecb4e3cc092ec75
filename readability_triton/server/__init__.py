"""Running and watching a tritonserver. Importing this package imports none of its modules.

`tritonserver` (`TritonServer`: start, model control, drain, stop), `installation` (the
binary, backends and environment), `backends` (which backends a server has; the repository
it can serve), `processes` (/proc), `admin` (the restricted APIs' key), `health` (probes
and the supervisor).
"""
