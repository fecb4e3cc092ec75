"""A stand-in for CuPy on the CPU that counts what a batch would cost a GPU: device calls,
host syncs and uploads (benchmarks/device_ops.py, tests/test_kernels.py).

`StandIn(library)` is an array module: NumPy underneath, its arrays a NumPy subclass that
counts, and `RawModule` the CPU build of the kernels (`host.HostRawModule`). Code written for
CuPy runs on it unchanged, with these counts in `standin.tally`:

- calls: every array-module function (`xp.zeros`, `xp.searchsorted`, ...), every ufunc and
  operator, every method that computes (`astype`, `sort`, `cumsum`, `sum`, ...), every
  indexing with an array (a gather or scatter) and every kernel launch. Views are free:
  basic slicing, `reshape`, `view`, `broadcast_to`, shapes and dtypes, as on CuPy;
- syncs: what makes CuPy wait for the device to know a size or a value: `flatnonzero`,
  `nonzero`, boolean masks, `bincount` (it reads the maximum), `unique`, `repeat` with
  counts, sorts (CuPy 13), and `int()`, `bool()`, `float()`, `item()`, `tolist()`, `get()`;
- uploads: host data given to `asarray`/`array` (a copy to the device).
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np

from .host import HostLibrary, HostRawModule

#: Array-module functions that cost nothing on a GPU (metadata) or that are not device work.
FREE = frozenset(
    {"broadcast_to", "reshape", "ravel", "dtype", "iinfo", "finfo", "result_type", "can_cast", "ndim", "shape"}
)
#: Functions whose result size (or value) the host must read back.
SYNCING = frozenset({"flatnonzero", "nonzero", "argwhere", "unique", "bincount", "extract", "compress", "sort"})
#: ndarray methods that compute; those in SYNCING_METHODS also wait for the device.
METHODS = ("astype", "copy", "sort", "argsort", "cumsum", "sum", "max", "min", "any", "all", "fill", "take", "nonzero")
SYNCING_METHODS = frozenset({"sort", "argsort", "nonzero"})


@dataclass
class Tally:
    calls: int = 0
    syncs: int = 0
    uploads: int = 0

    def reset(self) -> None:
        self.calls = self.syncs = self.uploads = 0

    def as_dict(self) -> dict:
        return {"calls": self.calls, "syncs": self.syncs, "uploads": self.uploads}


TALLY = Tally()


def _plain(obj):
    """NumPy arrays in place of counted ones, through tuples, lists and dicts."""
    if isinstance(obj, CountedArray):
        return obj.view(np.ndarray)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_plain(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _counted(obj):
    if isinstance(obj, np.ndarray):
        return obj.view(CountedArray)
    if isinstance(obj, np.generic):  # CuPy returns 0-d arrays where NumPy returns scalars
        return np.asarray(obj).view(CountedArray)
    if isinstance(obj, tuple):
        return tuple(_counted(x) for x in obj)
    if isinstance(obj, list):
        return [_counted(x) for x in obj]
    return obj


def _fancy(key) -> tuple[bool, bool]:
    """(an array index anywhere, a boolean one)."""
    parts = key if isinstance(key, tuple) else (key,)
    fancy = boolean = False
    for part in parts:
        if isinstance(part, (np.ndarray, list)):
            fancy = True
            boolean |= np.asarray(part).dtype == bool
    return fancy, boolean


class CountedArray(np.ndarray):
    """A NumPy array whose device work is counted in TALLY."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        TALLY.calls += 1
        if "out" in kwargs:
            kwargs["out"] = _plain(kwargs["out"])
        return _counted(getattr(ufunc, method)(*_plain(inputs), **kwargs))

    def __array_function__(self, func, types_, args, kwargs):
        TALLY.calls += 1
        TALLY.syncs += func.__name__ in SYNCING
        return _counted(func(*_plain(args), **_plain(kwargs)))

    def __getitem__(self, key):
        fancy, boolean = _fancy(_plain(key))
        TALLY.calls += fancy
        TALLY.syncs += boolean
        return _counted(self.view(np.ndarray)[_plain(key)])

    def __setitem__(self, key, value):
        _, boolean = _fancy(_plain(key))
        TALLY.calls += 1
        TALLY.syncs += boolean
        self.view(np.ndarray)[_plain(key)] = _plain(value)

    def _sync(self):
        TALLY.syncs += 1
        return self.view(np.ndarray)

    def __int__(self):
        return int(self._sync())

    def __index__(self):
        return self._sync().__index__()

    def __bool__(self):
        return bool(self._sync())

    def __float__(self):
        return float(self._sync())

    def item(self, *args):
        return self._sync().item(*args)

    def tolist(self):
        return self._sync().tolist()

    def get(self):
        return self._sync().copy()


def _method(name):
    def counted(self, *args, **kwargs):
        TALLY.calls += 1
        TALLY.syncs += name in SYNCING_METHODS
        return _counted(getattr(self.view(np.ndarray), name)(*_plain(args), **_plain(kwargs)))

    counted.__name__ = name
    return counted


for _name in METHODS:
    setattr(CountedArray, _name, _method(_name))


class StandIn(types.ModuleType):
    """The array module (see the module doc); `tally` counts, `launches` names each kernel run."""

    ndarray = CountedArray

    def __init__(self, library: HostLibrary):
        super().__init__("standin")
        self.library = library
        self.tally = TALLY
        self.launches: list[str] = []
        stream = types.SimpleNamespace(synchronize=self._synchronize)
        self.cuda = types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDevice=lambda: 0), get_current_stream=lambda: stream
        )

    def __getattr__(self, name):
        obj = getattr(np, name)
        if isinstance(obj, type) or not callable(obj):
            return obj  # dtypes, constants

        def counted(*args, **kwargs):
            if name not in FREE:
                TALLY.calls += 1
                counts_given = name == "repeat" and len(args) > 1 and isinstance(args[1], np.ndarray)
                TALLY.syncs += name in SYNCING or counts_given
            return _counted(obj(*_plain(args), **_plain(kwargs)))

        return counted

    def asarray(self, obj, dtype=None):
        if isinstance(obj, CountedArray):
            return obj if dtype is None or obj.dtype == dtype else obj.astype(dtype)
        TALLY.calls += 1
        TALLY.uploads += 1
        return np.array(obj, dtype=dtype).view(CountedArray)

    array = asarray

    def asnumpy(self, obj):
        TALLY.syncs += 1
        return np.array(_plain(obj))

    def RawModule(self, code: str, options=()):
        return HostRawModule(self.library, code, options, on_launch=self._launched)

    @staticmethod
    def _synchronize() -> None:
        TALLY.syncs += 1

    def _launched(self, kernel: str) -> None:
        TALLY.calls += 1
        self.launches.append(kernel)
