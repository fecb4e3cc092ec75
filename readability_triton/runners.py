"""What every runner is: the one object a Python model (and the in-process pipeline) runs.

A `Runner` says what it runs with `describe` (logged at load) and computes one batch with
`__call__`: texts, or arrays in the order of the model's inputs, in; one array per output
(a tuple for several) out, on the runner's device. Every adapter in `backends/` hands one to
`stub.runtime.PythonModel.execute`.

A `FolderRunner` also reads its files from a folder of an artifact set (or a model's version
folder) with `from_folder`, given the folder's manifest where the caller has read it
already; `FILES` names the files it reads, from `layout` (the first required; the
tokenizer's beyond `vocab.txt` optional).

The runners: `texts.TextRows` (validate) and `scoring.Blender` (postprocess);
`tokenizer.runner.TokenizerRunner`, `features.runner.FeatureRunner`,
`forest.runner.GTILRunner`, `forest.arrays.ArrayForestRunner`,
`bert.runner.TorchScriptRunner` and `bert.runner.OnnxRunner` read folders.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable


@runtime_checkable
class Runner(Protocol):
    def describe(self) -> str: ...

    def __call__(self, *inputs: Any) -> Any: ...


@runtime_checkable
class FolderRunner(Runner, Protocol):
    FILES: ClassVar[tuple[str, ...]]

    @classmethod
    def from_folder(cls, folder: str, *args: Any, **kwargs: Any) -> "FolderRunner": ...
