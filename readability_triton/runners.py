"""What every runner is: the one object a Python model (and the in-process pipeline) runs.

A runner reads its files from a folder of an artifact set (or a model's version folder)
with `from_folder`, says what it runs with `describe` (logged at load), and computes one
batch with `__call__`: texts, or arrays in the order of the model's inputs, in; one array
per output (a tuple for several) out, on the runner's device. `FILES` names the files it
reads, from `layout` (the first required; the tokenizer's beyond `vocab.txt` optional).

The runners: `tokenizer.runner.TokenizerRunner`, `features.runner.FeatureRunner`,
`forest.runner.GTILRunner`, `forest.arrays.ArrayForestRunner`,
`bert.runner.TorchScriptRunner` and `bert.runner.OnnxRunner`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable


@runtime_checkable
class Runner(Protocol):
    FILES: ClassVar[tuple[str, ...]]

    @classmethod
    def from_folder(cls, folder: str, *args: Any, **kwargs: Any) -> "Runner": ...

    def describe(self) -> str: ...

    def __call__(self, *inputs: Any) -> Any: ...
