"""The CR job records and job names: typed reads of the stored JSON (optional keys may be
absent, unknown or missing required ones are refused) and the names plan and summarise share."""

import pytest

from mechinterp_icr.experiments.cr.records import (
    LamRecord,
    TaskvecRecord,
    TrainRecord,
    job_name,
)
from mechinterp_icr.jobs import RecordError


def test_optional_keys_may_be_absent_and_are_not_written():
    lam = LamRecord.read({"error": "ValueError: x", "timings": {"cr4_lam_sweep": 1.0}})
    assert lam.row is None and lam.error == "ValueError: x"
    assert LamRecord(timings={}, row={"lam": 0.3}).to_json() == {"timings": {},
                                                                 "row": {"lam": 0.3}}
    assert TaskvecRecord.read({"status": "skipped", "timings": {}}).result is None
    with pytest.raises(RecordError, match=r"'cr4' job record must have the keys "
                                          r"\['status'(, 'timings')?\]"):
        TaskvecRecord.read({"result": {}, "timings": {}})
    with pytest.raises(RecordError, match="it has"):
        TrainRecord.read({"seed": 0, "task": {}, "phases": {}, "curves": {}, "seconds": {},
                          "timings": {}, "extra": 1})


def test_job_names_are_the_plans():
    assert job_name("train", 2) == "seed2/train"
    assert job_name("train", 2, variant="shared") == "shared/seed2/train"
    assert job_name("sweep", 0, setting="type-chain") == "sweep/type-chain/seed0"
    assert job_name("cr4-lam", 1, lam=0.3) == "cr4-lam/0.3/seed1"
    assert job_name("views") == "views"
    with pytest.raises(ValueError, match="takes a seed and lam"):
        job_name("cr4-lam", 1)
    with pytest.raises(ValueError, match="no 'cascade' jobs"):
        job_name("cascade", 1, variant="shared")
