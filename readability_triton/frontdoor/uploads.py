"""Model loads with `file:` content: code, not configuration.

Triton's model-control API loads a model from files sent in the request (`file:<path>`
parameters of a load, beside its `config`): tritonserver writes them to a folder of /tmp and
loads the model from there, so a `model.py` sent so runs, with the server's user and rights,
in a python-backend stub. The admin key that guards the API is therefore as good as a shell
on the server. `serve` passes such loads on only when started with `--allow-model-uploads`;
without it the door refuses them (HTTP 403, gRPC PERMISSION_DENIED) whatever the key, and a
load that names no files (reloading a model from the repository) is passed on as before.

A load whose body cannot be read is refused too: what tritonserver would read in it cannot
be known.

Where uploads are allowed, the door notes the folders tritonserver made for them
(`Uploads.watch`: the `/tmp/folderXXXXXX` folders of this user that appeared while a load
with files was in tritonserver's hands) and `serve` removes what is left of them when it
stops: tritonserver removes a folder itself when its model is unloaded and at a clean stop,
not when it is ended by SIGKILL (a frozen server's repair).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Awaitable, Callable, TypeVar

from .protobuf import Malformed, fields
from .wire import unique_keys

T = TypeVar("T")
#: Where tritonserver 2.51 puts a load's files (core r24.10: mkdtemp("/tmp/folderXXXXXX"),
#: whatever TMPDIR says).
FOLDERS = "/tmp/folder??????"

#: The prefix of a load parameter that carries a file's content.
FILE_PREFIX = "file:"
REFUSAL = (
    "loading a model with file: content runs code sent in the request as the server's user; this serve refuses "
    "it (start serve with --allow-model-uploads to allow it, for holders of the admin key)"
)

_PARAMETERS = 3  # RepositoryModelLoadRequest
_KEY = 1  # a map entry


def http_uploads(body: bytes) -> bool:
    """Whether a KServe v2 HTTP load request (`POST /v2/repository/models/<m>/load`) sends
    files, or cannot be read (True: refuse)."""
    if not body.strip():
        return False
    try:
        request = json.loads(bytes(body).decode("utf-8", "surrogateescape"), object_pairs_hook=unique_keys)
    except (ValueError, RecursionError):  # BadRequest (a key twice) is a ValueError
        return True
    if not isinstance(request, dict):
        return True
    parameters = request.get("parameters")
    if parameters is None:
        return False
    return not isinstance(parameters, dict) or any(str(key).startswith(FILE_PREFIX) for key in parameters)


def grpc_uploads(message: bytes) -> bool:
    """Whether a serialized RepositoryModelLoadRequest sends files, or cannot be read."""
    try:
        for number, kind, entry in fields(memoryview(message)):
            if number != _PARAMETERS or kind != 2:
                continue
            for inner, inner_kind, value in fields(entry):
                if inner == _KEY and inner_kind == 2 and bytes(value).startswith(FILE_PREFIX.encode()):
                    return True
    except Malformed:
        return True
    return False


def _folders() -> set[str]:
    uid = os.getuid()
    found = set()
    for path in glob.glob(FOLDERS):
        try:
            if os.stat(path).st_uid == uid:
                found.add(path)
        except OSError:
            pass
    return found


class Uploads:
    """The upload folders tritonserver made for loads this door passed on."""

    def __init__(self) -> None:
        self.folders: set[str] = set()

    async def watch(self, load: Callable[[], Awaitable[T]]) -> T:
        """`load()` (a load with files, passed on), noting the folders it made."""
        before = _folders()
        try:
            return await load()
        finally:
            self.folders |= _folders() - before

    def remove(self) -> list[str]:
        """Remove the noted folders that are still there (serve, after tritonserver stopped)."""
        removed = [path for path in sorted(self.folders) if os.path.isdir(path)]
        for path in removed:
            shutil.rmtree(path, ignore_errors=True)
        self.folders.clear()
        return removed
