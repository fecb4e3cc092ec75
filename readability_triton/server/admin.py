"""The key of tritonserver's restricted APIs: where it comes from, the flags that close
the APIs to clients without it, and the headers that open them.
"""

from __future__ import annotations

import os
import secrets

from ..errors import ServerError

#: The environment variable that holds the key of the restricted APIs (see `TritonServer`).
ADMIN_KEY_ENV = "READABILITY_TRITON_ADMIN_KEY"
#: The header that carries it: over HTTP as is, over gRPC as the metadata key
#: `triton-grpc-protocol-<ADMIN_HEADER>` (Triton's --grpc-restricted-protocol convention).
ADMIN_HEADER = "admin-key"
#: The APIs only a holder of the key may call: the model-repository API (index, load with a
#: config override or uploaded files, unload), the log and trace settings, and the
#: registration of shared-memory regions (which would let a client map any /dev/shm file,
#: the python backend's included, into the server). Inference, metadata, model
#: configuration, health and statistics stay open.
RESTRICTED_APIS = ("model-repository", "logging", "trace", "shared-memory")


def admin_key_from_environment() -> str:
    """The key of the restricted APIs: $READABILITY_TRITON_ADMIN_KEY, or the contents of the
    file $READABILITY_TRITON_ADMIN_KEY_FILE names (a Kubernetes Secret mounted as a file),
    else a new random one."""
    key = os.environ.get(ADMIN_KEY_ENV, "").strip()
    if not key and os.environ.get(ADMIN_KEY_ENV + "_FILE"):
        path = os.environ[ADMIN_KEY_ENV + "_FILE"]
        try:
            with open(path, encoding="utf-8") as handle:
                key = handle.read().strip()
        except OSError as err:
            raise ServerError(f"${ADMIN_KEY_ENV}_FILE: cannot read {path} ({err.strerror})") from None
    if key and not all(c.isalnum() or c in "-_.~" for c in key):
        raise ServerError(
            f"${ADMIN_KEY_ENV} may hold only letters, digits and -_.~ (it goes into a header and a command line)"
        )
    return key or secrets.token_urlsafe(24)


def restricted_api_args(key: str, apis=RESTRICTED_APIS) -> list[str]:
    """tritonserver's flags that close `apis` over HTTP and gRPC to clients without `key`."""
    spec = f"{','.join(apis)}:{ADMIN_HEADER}={key}"
    return ["--http-restricted-api", spec, "--grpc-restricted-protocol", spec]


def admin_headers(key: str, protocol: str = "http") -> dict[str, str]:
    """The headers (HTTP) or metadata (gRPC) that open the restricted APIs."""
    return {ADMIN_HEADER if protocol == "http" else f"triton-grpc-protocol-{ADMIN_HEADER}": key}
