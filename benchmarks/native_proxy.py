"""nginx as one proxy hop: what a native data plane costs on this host, for the floor benchmarks
(`door_floor.py` over HTTP/1.1, `grpc_floor.py` over HTTP/2).

One nginx process (`master_process off`, one event loop: the same single core as one door),
no access log, keep-alive both ways (upstream connections kept and reused, no limit on the
requests a connection carries), the request body buffered in memory as nginx does by default
for bodies this small. It passes requests on unchanged: no gate, no weighing, no limits beyond
nginx's own. Where nginx is not installed (`apt-get install nginx`), the benchmarks leave the
way out and say so.
"""

from __future__ import annotations

import os
import shutil
import subprocess

_PATHS = ("/usr/sbin/nginx", "/usr/local/nginx/sbin/nginx")
_TEMPORARY = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
#: what a benchmark says when it leaves the way out
MISSING = "nginx is not installed (apt-get install nginx): the way 'nginx' is left out"


def nginx_binary() -> str | None:
    """The nginx executable (PATH, then Debian's and the source build's places), or None."""
    found = shutil.which("nginx")
    if found:
        return found
    return next((path for path in _PATHS if os.access(path, os.X_OK)), None)


def config(folder: str, port: int, upstream: str, grpc: bool) -> str:
    """nginx.conf for one process on 127.0.0.1:`port` passing everything to `upstream`
    (host:port): HTTP/1.1 keep-alive, or with `grpc`, gRPC over cleartext HTTP/2 both ways."""
    temp = "\n".join(f"  {kind}_temp_path {os.path.join(folder, kind)};" for kind in _TEMPORARY)
    if grpc:
        listen, passing = f"listen 127.0.0.1:{port} http2;", "grpc_pass grpc://tritonserver;"
    else:
        listen = f"listen 127.0.0.1:{port};"
        passing = "\n      ".join(
            ("proxy_pass http://tritonserver;", "proxy_http_version 1.1;", 'proxy_set_header Connection "";')
        )
    return f"""daemon off;
master_process off;
worker_processes 1;
pid {os.path.join(folder, "nginx.pid")};
error_log {os.path.join(folder, "error.log")} warn;
events {{
  worker_connections 1024;
}}
http {{
  access_log off;
{temp}
  keepalive_requests 1000000000;
  keepalive_timeout 300s;
  upstream tritonserver {{
    server {upstream};
    keepalive 64;
    keepalive_requests 1000000000;
  }}
  server {{
    {listen}
    location / {{
      {passing}
    }}
  }}
}}
"""


def start(folder: str, port: int, upstream: str, grpc: bool = False) -> subprocess.Popen:
    """nginx, in the foreground as one process (its pid is the one whose CPU counts), with
    its configuration, temporary files and error log in `folder`; RuntimeError if there is
    no nginx or it refuses the configuration."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed (apt-get install nginx)")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "nginx.conf")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(config(folder, port, upstream, grpc))
    # -e: the error log before the configuration is read (else the packaged path is opened)
    base = [binary, "-p", folder, "-c", path, "-e", os.path.join(folder, "error.log")]
    checked = subprocess.run([*base, "-t", "-q"], capture_output=True, text=True)
    if checked.returncode != 0:
        raise RuntimeError(f"nginx refused its configuration {path}: {checked.stderr.strip()}")
    return subprocess.Popen(base, stdin=subprocess.DEVNULL)
