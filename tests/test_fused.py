"""Integration: the fused repository (`assemble --fused`: BERT inside preprocess, the forest
inside featurize) on the real tritonserver answers what the separate one answers, to the
last bit.

The other suites run on both repositories: every output selection over every client in
test_conformance.py; bad requests beside good ones under load, then a clean stop, in
test_faults.py; clients that give up, through serve's front door, in
test_supervision_served.py. A bare tritonserver 2.51 cannot stop cleanly after gRPC
cancellations whatever it serves (test_ensemble_rules.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from served import score_texts

from readability_triton import contracts as C
from readability_triton.corpus import default_texts

pytestmark = pytest.mark.integration


def test_the_fused_repository_answers_what_the_separate_one_does(portable_server, fused_server):
    """Every output, for requests of 1, 8 and 64 texts over gRPC: equal to the last bit (the
    same runners on the same rows, in one stub instead of two)."""
    texts = default_texts()[0][:64]
    for chunk in (texts[:1], texts[:8], texts):
        separate = score_texts(portable_server, "grpc", chunk)
        fused = score_texts(fused_server, "grpc", chunk)
        assert sorted(fused) == sorted(separate) == sorted(C.OUTPUTS)
        for name in C.OUTPUTS:
            np.testing.assert_array_equal(fused[name], separate[name], err_msg=f"{name}, {len(chunk)} texts")
