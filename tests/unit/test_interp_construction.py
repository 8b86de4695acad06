import pytest

from mechinterp_icr.config import ConfigError
from mechinterp_icr.models.construction import build_construction, evaluate_pt_relation
from mechinterp_icr.tasks.cr import CRTaskConfig, evaluate_icl


@pytest.fixture(scope="module")
def task():
    return CRTaskConfig(n_subjects=32, n_values=8).build(3)


def test_pt_construction_in_its_format_and_fails_on_icl(task):
    m = build_construction(task, "pt")
    assert evaluate_pt_relation(m, task, seed=1)["exact"] >= 0.99
    assert evaluate_icl(m, task, 1, subjects=task.heldout_subjects, n=256)["exact"] <= 0.1


def test_icl_construction_on_heldout_subjects(task):
    m = build_construction(task, "icl")
    r = evaluate_icl(m, task, 2, subjects=task.heldout_subjects, n=256)
    assert r["exact"] >= 0.99 and r["type"] >= 0.99


def test_construction_rejects_bad_variant(task):
    with pytest.raises(ConfigError, match="construction.variant"):
        build_construction(task, "foo")
