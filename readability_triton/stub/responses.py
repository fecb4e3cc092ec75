"""Answering the requests of one `execute` call: one vectorized pass over the batch, its
outputs split back into one response per request (NumPy by value on a CPU instance,
DLPack on a GPU one), and the errors: a `RequestError` is the client's (INVALID_ARG, and
only then is the batch retried request by request to find whose); anything else is
INTERNAL for every request of the pass, with the traceback in the server log.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

import numpy as np

from ..errors import RequestError
from .requests import Batch, host

#: DLPack device types whose memory the host can read: kDLCPU, kDLCUDAHost (pinned).
_HOST_DEVICES = (1, 3)


def output_tensor(pb_utils, name: str, array):
    """A `pb_utils.Tensor`: host arrays by value, device arrays through DLPack."""
    if type(array) is np.ndarray:  # the CPU instances' case, without the DLPack questions
        return pb_utils.Tensor(name, array if array.flags.c_contiguous else np.ascontiguousarray(array))
    device = getattr(array, "__dlpack_device__", None)
    if device is None or int(device()[0]) in _HOST_DEVICES:
        return pb_utils.Tensor(name, np.ascontiguousarray(array))
    # The python backend takes C-contiguous DLPack tensors only, and checks every
    # dimension but the first: a strided row slice would pass the check and be read wrong.
    flags = getattr(array, "flags", None)
    if flags is not None and not flags.c_contiguous:
        array = array.copy(order="C")
    # CuPy arrays carry __dlpack__/__dlpack_device__; passing the object (not a raw
    # capsule) lets the backend synchronise on the producer's stream.
    return pb_utils.Tensor.from_dlpack(name, array)


def error_response(pb_utils, error: tuple[str, str]):
    """A response carrying only an error: (message, the `TritonError` code's name)."""
    message, code = error
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, getattr(pb_utils.TritonError, code)))


def one_line(exc: BaseException) -> str:
    """What an exception says, in one line: its message, or, for a multi-line message such
    as a TorchScript traceback, the last line (where the interpreter puts the error)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[-1] if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _internal(exc: BaseException) -> tuple[str, str]:
    return (f"internal error: {type(exc).__name__}: {one_line(exc)} (the server log has the traceback)", "INTERNAL")


#: From a pass's outputs, a function that gives one request's outputs from its rows (a
#: slice): `split`'s `per_request` (preprocess cuts each request's ids to its bucket).
PerRequest = Callable[[dict[str, Any]], Callable[[slice], dict[str, Any]]]


def _rows(outputs: dict[str, Any]) -> Callable[[slice], dict[str, Any]]:
    return lambda rows: {name: array[rows] for name, array in outputs.items()}


def split(
    batch: Batch, outputs: dict[str, Any], per_request: PerRequest | None = None
) -> list[dict[str, Any] | tuple[str, str]]:
    """Per request: its rows of every output (as `per_request` gives them, where given), or
    its error."""
    take = (per_request or _rows)(outputs)
    return [batch.errors[index] if rows is None else take(rows) for index, rows in batch.spans()]


def respond(pb_utils, results: list[dict[str, Any] | tuple[str, str]]) -> list:
    """One response per request from what `split` (or the retry) gives it."""
    return [
        error_response(pb_utils, result)
        if isinstance(result, tuple)
        else pb_utils.InferenceResponse(
            output_tensors=[output_tensor(pb_utils, name, array) for name, array in result.items()]
        )
        for result in results
    ]


def _refused(refuse, why: str, outputs: dict[str, Any], spans) -> dict[int, tuple[str, str]]:
    """{request index: its INVALID_ARG} for each request that holds a row `refuse` flags in
    `outputs` (`why` names the request's first such row: a format string with {row})."""
    if refuse is None:
        return {}
    flagged = host(refuse(outputs)).astype(bool).reshape(-1)  # one small copy on a GPU instance
    if not flagged.any():
        return {}
    out = {}
    for index, rows in spans:
        if rows is not None:
            hit = np.flatnonzero(flagged[rows])
            if hit.size:
                out[index] = (why.format(row=int(hit[0])), "INVALID_ARG")
    return out


def run_batch(
    pb_utils,
    batch: Batch,
    compute: Callable[[Any], dict[str, Any]],
    logger=None,
    refuse: Callable[[dict[str, Any]], Any] | None = None,
    why: str = "",
    per_request: PerRequest | None = None,
) -> list:
    """Run `compute` once on the rows of all good requests and split the result back.

    When the batched pass raises a `RequestError` (a request's input is at fault: which one
    is not known), each request is run alone, so that only the culprits fail (INVALID_ARG,
    with the error's message). Any other error is the server's: every request of the pass
    gets INTERNAL (one line; the traceback goes to the server log) and nothing is retried
    (on a device out of memory, N more passes would only fail N more times).

    `refuse`, where given, flags rows by what the pass computed (a bool per row, on either
    device: the entrance's word check reads featurize's word counts); a request with a
    flagged row gets INVALID_ARG (`why`, a format string with {row}: its first such row)
    and the others their rows, without a second pass. `per_request`: how a request's rows
    are taken from the outputs (`split`).
    """
    if len(batch.errors) == batch.n_requests:
        return respond(pb_utils, split(batch, {}))
    try:
        outputs = compute(batch.items)
        results = split(batch, outputs, per_request)
        for index, error in _refused(refuse, why, outputs, batch.spans()).items():
            results[index] = error
        return respond(pb_utils, results)
    except RequestError as exc:
        if logger is not None:
            logger.log_warn(
                f"a request of the batch ({batch.n_requests} requests) was refused ({one_line(exc)}); "
                "running them one by one to find which"
            )
    except Exception as exc:  # noqa: BLE001 - the server's fault: INTERNAL for the pass
        if logger is not None:
            logger.log_error(f"the batched pass over {batch.n_requests} requests failed:\n{traceback.format_exc()}")
        error = _internal(exc)
        return respond(pb_utils, [batch.errors.get(index, error) for index, _ in batch.spans()])
    results = []
    for index, rows in batch.spans():
        if rows is None:
            results.append(batch.errors[index])
            continue
        try:
            outputs = compute(batch.rows(rows.start, rows.stop, index))
            own = slice(0, rows.stop - rows.start)
            refused = _refused(refuse, why, outputs, [(index, own)])
            results.append(refused.get(index) or (per_request or _rows)(outputs)(own))
        except RequestError as exc:
            results.append((one_line(exc), "INVALID_ARG"))
        except Exception as exc:  # noqa: BLE001
            if logger is not None:
                logger.log_error(f"request {index} of the batch failed:\n{traceback.format_exc()}")
            results.append(_internal(exc))
    return respond(pb_utils, results)
