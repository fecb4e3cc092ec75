"""The canary: a text whose answers `assemble` records beside the ensemble
(`<repository>/readability/1/canary.json`), and `serve`'s health checks compare with what
the server answers (`server.health`)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from .. import contracts as C

CANARY = C.CANARY_TEXT
#: Where `assemble` records the canary's expected answers: in the ensemble's version folder.
CANARY_FILE = "canary.json"


@dataclass(frozen=True)
class Canary:
    """The canary text and the answers the repository's own models give it."""

    text: str
    expected: dict[str, float]  # ensemble output -> value
    tolerance: float  # largest |served - expected| that is still right

    def judge(self, outputs: dict[str, float]) -> str | None:
        """None when `outputs` are right, else what differs."""
        wrong = []
        for name, want in self.expected.items():
            got = outputs.get(name)
            if got is None or not math.isfinite(got) or abs(got - want) > self.tolerance:
                wrong.append(f"{name} {got} (expected {want:.6f} +- {self.tolerance:g})")
        return ("wrong answer: " + ", ".join(wrong)) if wrong else None

    def save(self, repository: str) -> str:
        path = canary_path(repository)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"text": self.text, "expected": self.expected, "tolerance": self.tolerance}, handle, indent=2)
        return path

    @classmethod
    def load(cls, repository: str) -> Canary | None:
        """The canary `assemble` recorded in `repository`, or None (an older repository)."""
        path = canary_path(repository)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return cls(str(data["text"]), {k: float(v) for k, v in data["expected"].items()}, float(data["tolerance"]))


def canary_path(repository: str) -> str:
    return os.path.join(repository, C.ENSEMBLE, "1", CANARY_FILE)
