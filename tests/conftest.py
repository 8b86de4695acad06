"""Test settings and fixtures. Builders live in ``helpers.py`` (imported as ``helpers``).

Tests are layered by cost: ``unit/`` (milliseconds, no training), ``integration/`` (tiny
training, seconds), ``e2e/`` (the CLI and tiny reproductions). Each folder's tests get the
marker of the same name, so ``pytest -m unit`` runs the fast layer only; ``slow`` tests run in
a separate CI step.
"""

import os
import warnings

import pytest
import torch

os.environ.setdefault("MECHINTERP_ICR_NO_PNG", "1")  # tests do not need kaleido PNGs
# one thread in every process the tests start too (`make test` runs two test workers on 2 cores)
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_LAYERS = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config, items):
    for item in items:
        for layer in _LAYERS:
            if f"{os.sep}tests{os.sep}{layer}{os.sep}" in str(item.fspath):
                item.add_marker(getattr(pytest.mark, layer))


warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")
# one intra-op thread: two threads while anything else runs can be 30x slower on 2 cores
torch.set_num_threads(1)


@pytest.fixture
def induction_task():
    from mechinterp_icr.tasks.induction import InductionTaskConfig

    return InductionTaskConfig(n_tokens=16, half_len=8).build()
