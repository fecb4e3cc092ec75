"""One base for every problem a user can fix: `ReadabilityError`.

Each error says what is wrong and what to do; the command line prints it in one line
(exit status 2) without a traceback. The specific errors also derive from the built-in
exception a caller would catch (`ValueError` or `RuntimeError`).
"""

from __future__ import annotations


class ReadabilityError(Exception):
    """A problem the user can fix (the message says how)."""


class RequestError(ReadabilityError, ValueError):
    """What a request's own input makes impossible: the only error a served model answers
    with INVALID_ARG (any other is INTERNAL, its traceback in the server log)."""


class CommandError(ReadabilityError):
    """A bad command line."""


class DataError(ReadabilityError, ValueError):
    """A CSV that cannot be used (missing, empty, wrong columns, bad values)."""


class VocabularyError(ReadabilityError, ValueError):
    """A vocabulary (or vocabulary file) that does not follow the spec."""


class ManifestError(ReadabilityError, ValueError):
    """An artifact set that does not match its manifest or the contracts."""


class AssemblyError(ReadabilityError, ValueError):
    """Artifacts or options that cannot make a working model repository."""


class EvaluationError(ReadabilityError, ValueError):
    """Nothing to evaluate, or inputs that do not fit together."""


class ForestError(ReadabilityError, ValueError):
    """Forest training data or options the user has to fix."""


class BertError(ReadabilityError, ValueError):
    """A BERT checkpoint, tokenizer or option the user has to fix."""


class ExportError(ReadabilityError, RuntimeError):
    """An exported model does not reproduce eager PyTorch; nothing was written."""


class DemoError(ReadabilityError, ValueError):
    """Demo-build options or an environment the user has to fix."""


class ServerError(ReadabilityError, RuntimeError):
    """The server could not be found, prepared, started or controlled."""


class ClientError(ReadabilityError, RuntimeError):
    """The server could not be reached or refused a request."""


class ReleaseError(ReadabilityError, ValueError):
    """A Triton release this project cannot target, or an image that does not fit one."""
