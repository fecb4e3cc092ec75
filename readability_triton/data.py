"""Reading CommonLit-style CSV files (`excerpt`, `target`) with clear errors, and the
digests that identify a training set (`data_digest`) and its texts (`text_fingerprints`).

Plain `csv` (no pandas) so that serving-side tools need nothing heavy. Every error says
which file, which column or row, and what to do.
"""

from __future__ import annotations

import csv
import math
import os
import sys
from dataclasses import dataclass, field

from .errors import DataError

#: Where the shared CommonLit training excerpts live, relative to a checkout.
COMMONLIT_CSV = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data", "commonlit", "train.csv"
)


@dataclass
class Table:
    texts: list[str]
    targets: list[float] | None
    path: str
    #: The file's line where each row starts (a quoted text may span lines).
    lines: list[int] = field(default_factory=list)


def _open_rows(path: str):
    if path == "-":
        return csv.DictReader(sys.stdin), None
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file")
    handle = open(path, newline="", encoding="utf-8")
    return csv.DictReader(handle), handle


def read_table(path: str, column: str = "excerpt", target: str | None = None) -> Table:
    """Texts from `column` (and float targets from `target`, if given) of a CSV file.

    `path` may be "-" for standard input.
    """
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    reader, handle = _open_rows(path)
    try:
        try:
            fields = reader.fieldnames
        except UnicodeDecodeError as err:
            raise DataError(f"{path}: not UTF-8 text ({err})") from None
        if not fields:
            raise DataError(f"{path}: the file is empty (expected a header row with a {column!r} column)")
        wanted = [column] + ([target] if target else [])
        missing = [name for name in wanted if name not in fields]
        if missing:
            options = " and ".join(
                option for name, option in ((column, "--column"), (target, "--target")) if name in missing
            )
            raise DataError(
                f"{path}: no column {', '.join(map(repr, missing))}; the columns are "
                f"{', '.join(map(repr, fields))} (choose {'them' if len(missing) > 1 else 'one'} with {options})"
            )
        texts: list[str] = []
        targets: list[float] = []
        lines: list[int] = []
        raw = reader.reader  # csv.reader: its blank rows are seen here (DictReader skips them unseen)
        at = {name: fields.index(name) for name in wanted}
        try:
            while True:
                line = raw.line_num + 1  # where the next row starts (a quoted text may span lines)
                values = next(raw, None)
                if values is None:
                    break
                if not values:
                    continue
                lines.append(line)
                if at[column] >= len(values):
                    raise DataError(f"{path}, line {line}: the row has no {column!r} value")
                texts.append(values[at[column]])
                if target:
                    raw_target = (values[at[target]] if at[target] < len(values) else "").strip()
                    try:
                        value = float(raw_target)
                    except ValueError:
                        raise DataError(
                            f"{path}, line {line}: target {raw_target!r} in column {target!r} is not a number"
                        ) from None
                    if not math.isfinite(value):
                        raise DataError(f"{path}, line {line}: target {raw_target!r} is not finite")
                    targets.append(value)
        except UnicodeDecodeError as err:
            raise DataError(f"{path}: not UTF-8 text ({err})") from None
        except csv.Error as err:
            raise DataError(f"{path}: malformed CSV ({err})") from None
    finally:
        if handle is not None:
            handle.close()
    if not texts:
        raise DataError(f"{path}: no data rows (only a header)")
    return Table(texts, targets if target else None, path, lines)


def data_digest(texts, targets) -> str:
    """A SHA-256 of the training texts and targets, in order: out-of-fold predictions
    recorded by different training commands can be combined only when it matches (and so
    do the folds and the seed)."""
    import hashlib
    import json

    digest = hashlib.sha256()
    for text, target in zip(texts, targets, strict=True):
        digest.update(
            json.dumps(
                [text if isinstance(text, str) else bytes(text).decode("utf-8", "replace"), float(target)]
            ).encode("utf-8")
        )
    return digest.hexdigest()


def text_fingerprints(texts) -> list[str]:
    """A short hash (40 bits) of each text: recorded by the training commands so that
    `train-blend` can tell texts the models saw from texts they did not."""
    import hashlib

    return [hashlib.sha256(t.encode("utf-8") if isinstance(t, str) else bytes(t)).hexdigest()[:10] for t in texts]
