"""The one progress protocol of the library. A long computation takes `progress`, a factory
with tqdm's signature, `progress(iterable=None, *, total=None, desc=None, unit="it")`; the
bar it gives is a context manager with `update(n)` (or, given an iterable, iterates it).
The command line passes tqdm's (`cli.common.progress`); `None` or `no_progress` shows
nothing.
"""

from __future__ import annotations


class _Silent:
    def __init__(self, iterable=None):
        self.iterable = iterable
        self.n = 0

    def __iter__(self):
        return iter(self.iterable if self.iterable is not None else ())

    def __enter__(self) -> "_Silent":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def update(self, n=1) -> None:
        self.n += n

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass


def no_progress(iterable=None, **kwargs) -> _Silent:
    """A bar that shows nothing (counts, iterates)."""
    return _Silent(iterable)
