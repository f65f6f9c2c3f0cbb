"""Shared test setup.

Without a GPU, Triton kernels run on CPU tensors through the interpreter and tests marked `gpu`
are skipped. With one (`pytest -m gpu` on the H200), kernels compile for the device as usual.
"""

import os
import warnings

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = "cuda" if HAS_GPU else "cpu"


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def record():
    """Every warning raised inside the test, none filtered out."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
