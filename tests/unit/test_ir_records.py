"""The IR job records: one frozen dataclass per kind of job, read back from the stored JSON
with the same keys, and one job-name helper shared by plan and summarise."""

import pytest

from mechinterp_icr.experiments.ir.records import (
    JOB_KINDS,
    MainRecord,
    RowRecord,
    job_name,
    read_record,
)
from mechinterp_icr.jobs import RecordError


def test_a_record_round_trips_through_its_stored_keys():
    rec = MainRecord({"memory_acc": 1.0}, {}, {"gap": (0.1, 0.2)}, {}, {}, {"IR-1": 2.0})
    data = rec.to_json()
    assert set(data) == {"IR-1", "IR-2", "IR-3", "IR-4", "IR-8", "timings"}
    assert data["IR-3"]["gap"] == [0.1, 0.2]  # plain JSON, as it reads back from its file
    assert MainRecord.read(data).ir1 == {"memory_acc": 1.0}


def test_a_record_with_other_keys_is_refused_naming_them():
    with pytest.raises(RecordError, match=r"'row' job record must have the keys "
                                          r"\['row', 'timings'\] \(optional: \[\]\), it has "
                                          r"\['rows', 'timings'\]"):
        RowRecord.read({"rows": [], "timings": {}})


def test_job_names_are_the_plans():
    assert job_name("main", 3) == "seed3/main"
    assert job_name("sample_learned", 0, n=128) == "sample_learned/n128/seed0"
    assert job_name("ht_overwrite", 0, run="ht_raw_pgd") == "seed0/ht_overwrite/ht_raw_pgd"
    with pytest.raises(ValueError, match="takes n"):
        job_name("gap", 0)
    with pytest.raises(ValueError, match="not one of"):
        job_name("mian", 0)
    records = {"gap/n64/seed1": {"row": {"n": 64}, "timings": {}}}
    assert read_record(records, "gap", 1, n=64).row == {"n": 64}
    assert set(JOB_KINDS) >= {"main", "ir8_tok", "ir6", "sample"}
