"""Reading the requests of one `execute` call into one batch: the texts of a BYTES input
(checked by `validation`, as the `validate` step does) or the arrays of numeric inputs
(shapes, batch sizes and, where asked, finiteness), each bad request set aside with its own
reason; the good ones concatenated for one vectorized pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .. import contracts, validation
from ..device import host
from ..errors import RequestError
from ..triton_messages import IN_REQUEST


@dataclass
class Batch:
    """The inputs of all good requests of one `execute` call, concatenated."""

    n_requests: int
    counts: list[int] = field(default_factory=list)  # rows per request (0 for failed ones)
    errors: dict[int, tuple[str, str]] = field(default_factory=dict)  # index -> (message, code)
    items: list | dict = field(default_factory=list)  # the rows: texts, or {input name: array}
    #: index -> {input name: the request's own shape after the batch axis}, where requests of
    #: several widths were zero-padded together (`_join`): its rows alone are cut back to it
    shapes: dict[int, dict[str, tuple[int, ...]]] = field(default_factory=dict)

    def fail(self, index: int, message: str, code: str = "INVALID_ARG") -> None:
        self.errors[index] = (message, code)
        self.counts[index] = 0

    def spans(self):
        """(index, rows) per request, in order: `rows` the slice of the concatenated inputs
        that is the request's, None for a failed request."""
        start = 0
        for index in range(self.n_requests):
            if index in self.errors:
                yield index, None
                continue
            yield index, slice(start, start + self.counts[index])
            start += self.counts[index]

    def rows(self, start: int, stop: int, index: int | None = None):
        """Rows `start:stop` of the good requests' concatenated inputs; with `index` (the
        request they are), each input cut back to that request's own shape where it was
        padded to join others (so that a request run alone is as it came)."""
        if isinstance(self.items, dict):
            own = self.shapes.get(index, {}) if index is not None else {}
            return {
                name: array[(slice(start, stop),) + tuple(slice(0, n) for n in own[name])]
                if name in own
                else array[start:stop]
                for name, array in self.items.items()
            }
        return self.items[start:stop]


def input_tensors(request) -> dict[str, Any]:
    """{name: tensor} of a request's inputs, from one `inputs()` call (`pb_utils`'
    `get_input_tensor_by_name` lists them all again for every name it looks up)."""
    tensors: dict[str, Any] = {}
    for tensor in request.inputs():
        tensors.setdefault(tensor.name(), tensor)  # the first of a name, as pb_utils finds it
    return tensors


def read_text_requests(
    pb_utils,
    requests,
    name: str = contracts.TEXT,
    max_text_bytes: int = contracts.DEFAULT_MAX_TEXT_BYTES,
    require_words: bool = False,
) -> Batch:
    """Collect the `TEXT` rows of every request; bad requests are set aside with a reason.

    A request fails alone when its input is missing, is not a [batch, 1] BYTES tensor,
    holds a text over `max_text_bytes` bytes, holds a text that is not valid UTF-8, or
    (with `require_words`) holds a text without a word. The word check runs once over the
    texts of all requests.
    """
    batch = Batch(len(requests), counts=[0] * len(requests))
    accepted: list[tuple[int, list[bytes]]] = []
    for index, request in enumerate(requests):
        tensor = input_tensors(request).get(name)
        if tensor is None:
            batch.fail(index, f"missing input {name}")
            continue
        array = tensor.as_numpy()  # BYTES tensors always live on the CPU
        if array.dtype != np.object_ or array.ndim != 2 or array.shape[1] != 1:
            batch.fail(
                index,
                f"input {name} must be a [batch, 1] BYTES tensor, got "
                f"dtype {array.dtype} and shape {list(array.shape)}",
            )
            continue
        rows = [row if isinstance(row, bytes) else str(row).encode("utf-8") for row in array[:, 0]]
        problem = validation.size_and_encoding(rows, max_text_bytes, where=IN_REQUEST)
        if problem is not None:
            batch.fail(index, problem)
            continue
        accepted.append((index, rows))
    if require_words and accepted:
        problems = validation.without_words([rows for _, rows in accepted], where=IN_REQUEST)
        for (index, _), problem in zip(accepted, problems):
            if problem is not None:
                batch.fail(index, problem)
    texts: list[bytes] = []
    for index, rows in accepted:
        if index not in batch.errors:
            batch.counts[index] = len(rows)
            texts.extend(rows)
    batch.items = texts
    return batch


def _all_finite(xp, arrays) -> bool:
    """Whether every value of `arrays` is finite: one small copy to the host, also on a GPU
    instance (the rows at fault are looked for only when not)."""
    every = xp.isfinite(arrays[0]).all()
    for array in arrays[1:]:
        every = every & xp.isfinite(array).all()
    return bool(every)


def input_array(tensor, xp, on_cpu: bool | None = None):
    """A numeric input tensor as an `xp` array, without `as_numpy()` on a GPU tensor
    (`on_cpu`: what `tensor.is_cpu()` said, where the caller asked already)."""
    if on_cpu is None:
        on_cpu = tensor.is_cpu()
    if on_cpu:
        array = tensor.as_numpy()
        return array if xp is np else xp.asarray(array)
    if xp is np:  # a GPU tensor reached a CPU instance: copy it down through CuPy
        import cupy

        return cupy.asnumpy(cupy.from_dlpack(tensor))
    return xp.from_dlpack(tensor)


def _fits(shape, dims) -> bool:
    """Whether an input of `shape` matches the config's `dims` after the batch dimension
    (-1: any length)."""
    return len(shape) == 1 + len(dims) and all(d == -1 or d == s for s, d in zip(shape[1:], dims))


def _join(xp, parts: list):
    """The requests' arrays joined along the batch axis; where a variable dimension differs
    between them (Triton batches only equal shapes, but an execute without the batcher may
    hold several), each is zero-padded on the right to the widest: the padding BERT's ids and
    attention mask take, the only variable-length inputs."""
    if len({a.shape[1:] for a in parts}) == 1:
        return xp.concatenate(parts)
    widest = tuple(max(a.shape[axis] for a in parts) for axis in range(1, parts[0].ndim))
    out = xp.zeros((sum(len(a) for a in parts), *widest), dtype=parts[0].dtype)
    start = 0
    for array in parts:
        where = (slice(start, start + len(array)),) + tuple(slice(0, n) for n in array.shape[1:])
        out[where] = array
        start += len(array)
    return out


def read_array_requests(
    pb_utils,
    requests,
    names: Sequence[str],
    xp,
    dims: dict[str, tuple[int, ...]],
    finite: bool = False,
    arrivals: dict[str, dict[str, int]] | None = None,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> Batch:
    """Collect numeric inputs of every request and concatenate each along the batch axis
    (`Batch.items` maps each name to the joined array). A request fails alone when an
    input is missing, has the wrong shape, its inputs' batch sizes differ or (with
    `finite`) it holds NaN or infinity; the finiteness check is one pass over the batch.
    A -1 in `dims` takes any length (requests of different lengths: `_join`).
    `arrivals[name]["cpu" or "gpu"]` counts where each input tensor arrived (`is_cpu()`).
    `check(arrays)` (a request's {name: array}) fails a request alone where it raises
    RequestError, before the arrays join the others'."""
    batch = Batch(len(requests), counts=[0] * len(requests))
    parts: dict[str, list] = {name: [] for name in names}
    order: list[int] = []
    for index, request in enumerate(requests):
        tensors = input_tensors(request)
        arrays = {}
        for name in names:
            tensor = tensors.get(name)
            if tensor is None:
                batch.fail(index, f"missing input {name}")
                break
            on_cpu = tensor.is_cpu()
            if arrivals is not None and name in arrivals:
                arrivals[name]["cpu" if on_cpu else "gpu"] += 1
            array = input_array(tensor, xp, on_cpu)
            if not _fits(array.shape, dims[name]):
                batch.fail(
                    index,
                    f"input {name} must have shape [batch, {', '.join(map(str, dims[name]))}], got {list(array.shape)}",
                )
                break
            arrays[name] = array
        else:
            counts = {int(a.shape[0]) for a in arrays.values()}
            if len(counts) != 1:
                batch.fail(index, f"inputs {', '.join(names)} have different batch sizes")
                continue
            if check is not None:
                try:
                    check(arrays)
                except RequestError as exc:
                    batch.fail(index, str(exc).strip().splitlines()[0] if str(exc).strip() else "bad input")
                    continue
            batch.counts[index] = counts.pop()
            order.append(index)
            for name in names:
                parts[name].append(arrays[name])
    joined: dict[str, Any] = {name: (_join(xp, parts[name]) if parts[name] else None) for name in names}
    for name in names:  # requests of several widths, padded together: each one's own shape
        if parts[name] and len({a.shape[1:] for a in parts[name]}) > 1:
            for index, array in zip(order, parts[name]):
                batch.shapes.setdefault(index, {})[name] = tuple(array.shape[1:])
    if finite and order and not _all_finite(xp, [joined[name] for name in names]):
        rows = sum(batch.counts[i] for i in order)
        ok = xp.ones(rows, dtype=bool)
        for name in names:
            ok &= xp.isfinite(joined[name].reshape(rows, -1)).all(axis=1)
        ok = host(ok)
        start, keep = 0, np.ones(rows, dtype=bool)
        for index in order:
            stop = start + batch.counts[index]
            bad = np.flatnonzero(~ok[start:stop])
            if bad.size:
                keep[start:stop] = False
                batch.fail(
                    index,
                    f"row {int(bad[0])} of the request holds NaN or infinity in "
                    f"{' or '.join(names)}; the scores must be finite",
                )
            start = stop
        index_array = xp.asarray(np.flatnonzero(keep))
        joined = {name: array[index_array] for name, array in joined.items()}
    batch.items = joined
    return batch
