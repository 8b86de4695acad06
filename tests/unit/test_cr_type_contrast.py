"""The type bounds of CR-1 and of CR-3's control as within-model contrasts in the shared-token
variant (revised 2026-12-06; SPEC 0, "chance from the model, not from a formula"): the
uninformative demos (every demo of another type than the query's, on the same prompts), the
contrast a model that ignores the demos shows (none) and one that copies them (all), and the
verdict code fed null models: a PT-like model that ignores the demos meets CR-1's variant
bound, a control without a contrast misbehaves, a contrast of 0.2 fails, and the default
task's CR-1 and CR-3 are decided exactly as under the old 1/L + 0.05 rule."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mechinterp_icr.claims import HOLDS, INCONCLUSIVE, NOT_HOLD, Claim
from mechinterp_icr.claims.protocol import ClaimSpec, spec_controls
from mechinterp_icr.claims.protocol import condition as _c
from mechinterp_icr.claims.protocol import negative as _neg
from mechinterp_icr.claims.redecide import redecide_claim
from mechinterp_icr.config import ConfigError
from mechinterp_icr.experiments.cr.claims import cr123_from_metrics
from mechinterp_icr.experiments.cr.records import UninfRecord, job_name
from mechinterp_icr.experiments.cr.uninformative import baseline_metrics, baseline_table
from mechinterp_icr.tasks.cr import CRTaskConfig, evaluate_icl
from mechinterp_icr.tasks.cr_eval import other_type_demos

SEEDS = ("0", "1", "2", "3", "4")
SHARED = "(shared tokens)"


# ---- the uninformative demos -------------------------------------------------------------------
@pytest.mark.parametrize("share", [0.0, 0.8])
def test_uninformative_demos_change_only_the_demo_types(share):
    task = CRTaskConfig(attr_share=share).build(0)
    b = task.sample_icl(np.random.default_rng(0), 256, K=4)
    u = other_type_demos(task, b, np.random.default_rng(1))
    rows, pos = np.arange(256)[:, None], b.meta["demo_attr_pos"].numpy() + 1
    query_type = b.meta["type"].numpy()[:, None]
    types = u.meta["demo_types"].numpy()
    assert (types != query_type).all()  # every demo of another type than the query's
    assert set(np.unique((types - query_type) % 4)) == {1, 2, 3}  # each other type drawn
    subjects = b.meta["demo_subjects"].numpy()
    assert (u.tokens.numpy()[rows, pos] == task.answer_id(subjects, types)).all()
    changed = (u.tokens != b.tokens).numpy()
    assert changed.sum() == changed[rows, pos].sum()  # the same prompt otherwise
    assert torch.equal(u.targets, b.targets) and torch.equal(u.meta["answer"], b.meta["answer"])
    shared = task.has_type(u.tokens.numpy()[rows, pos], query_type).mean()
    assert (shared == 0) if share == 0 else (0 < shared < 0.5)  # shared tokens in the variant


def test_uninformative_demos_need_another_type():
    task = CRTaskConfig(n_types=1).build(0)
    b = task.sample_icl(np.random.default_rng(0), 4, K=2)
    with pytest.raises(ConfigError, match="task.n_types"):
        other_type_demos(task, b, np.random.default_rng(1))


class _NullModel(torch.nn.Module):
    """Logits at a position from its own token alone (ignores the demos), or (``copy``) the
    counts of the tokens so far (guesses a demo's attribute: reads the demos' type)."""

    def __init__(self, d_vocab: int, copy: bool):
        super().__init__()
        self.cfg = SimpleNamespace(n_ctx=64)
        self.table = torch.nn.Parameter(torch.randn(d_vocab, d_vocab,
                                                    generator=torch.Generator().manual_seed(0)))
        self.copy, self.d_vocab = copy, d_vocab

    def forward(self, tokens):
        if self.copy:
            return torch.nn.functional.one_hot(tokens, self.d_vocab).float().cumsum(1)
        return self.table[tokens]


@pytest.mark.parametrize("share", [0.0, 0.8])
def test_a_model_that_ignores_the_demos_shows_no_contrast_and_a_demo_copier_all(share):
    task = CRTaskConfig(attr_share=share).build(0)

    def contrast(copy):
        m = _NullModel(task.d_vocab, copy)
        kw = {"subjects": task.heldout_subjects, "K": 4, "n": 600}
        real = evaluate_icl(m, task, [0, 300], **kw)
        other = evaluate_icl(m, task, [0, 300], uninformative=[0, 320], **kw)
        return real["restricted_type"], other["restricted_type"], other["demo_query_type"]

    real, other, shared = contrast(False)
    assert real == other and 0.1 < real < 0.7  # chance, higher with shared tokens
    real, other, _ = contrast(True)
    assert real == 1.0 and other <= shared + 0.05 and real - other > 0.5


# ---- the job record's metrics --------------------------------------------------------------------
def _record(**phases):
    return UninfRecord(seed=0, K=4, n=8, timings={},
                       phases={p: {"real": r, "uninformative": u, "contrast": r - u,
                                   "demo_query_type": 0.25} for p, (r, u) in phases.items()})


def test_baseline_metrics_keep_only_a_contrast_on_the_stored_model_and_prompts():
    stored = {"CR-1": {"heldout_icl_best_attr_type": 0.4, "ft_heldout_icl_best_attr_type": 0.9},
              "CR-3": {"mixed_heldout_icl_best_attr_type": 0.45}}
    rec = _record(**{"pretrain": (0.4, 0.39), "ft-icl": (0.9, 0.3),
                     "ft-iclgrm-mixed": (0.5, 0.44)})
    add, problems = baseline_metrics(rec, stored)
    assert add["CR-1"] == {"heldout_icl_best_attr_type_uninf": 0.39,
                           "ft_heldout_icl_best_attr_type_uninf": 0.3,
                           "uninf_demo_query_type": 0.25}
    # the job's real-demo number is not the stored one: another model or other prompts
    assert np.isnan(add["CR-3"]["mixed_heldout_icl_best_attr_type_uninf"])
    assert len(problems) == 1 and "ft-iclgrm-mixed" in problems[0]
    assert baseline_metrics(None, stored) == ({}, ["the uninformative-demo job did not run"])
    rows = baseline_table({0: rec, 1: None})
    assert [r["phase"] for r in rows] == ["pretrain", "ft-icl", "ft-iclgrm-mixed"]
    assert rows[1]["contrast"] == pytest.approx(0.6)


def test_the_job_runs_in_both_tasks():
    assert job_name("uninf-demos", 3) == "seed3/uninf-demos"
    assert job_name("uninf-demos", 3, variant="shared") == "shared/seed3/uninf-demos"


# ---- the verdicts on null models -----------------------------------------------------------------
def _per(v, i):
    return v[i] if isinstance(v, list) else v


def _claims(variant="shared", pt=(0.42, 0.42), ft=(0.97, 0.12), mixed=(0.43, 0.42),
            typed=0.99, uninf=True):
    """CR-1 and CR-3 of five seeds: (real, uninformative) type accuracy of the PT-only model,
    the ICL-finetuned model and the mixed-type ICL+Grm finetune (a value a list: per seed)."""
    c1, c3 = {}, {}
    for i, s in enumerate(SEEDS):
        c1[s] = {"pt_typed_recall": _per(typed, i),
                 "heldout_icl_best_attr_type": _per(pt[0], i),
                 "ft_heldout_icl_best_attr_type": _per(ft[0], i)}
        c3[s] = {"heldout_icl_exact": 0.9, "mixed_heldout_icl_best_attr_type": _per(mixed[0], i)}
        if uninf:
            c1[s].update(heldout_icl_best_attr_type_uninf=_per(pt[1], i),
                         ft_heldout_icl_best_attr_type_uninf=_per(ft[1], i))
            c3[s]["mixed_heldout_icl_best_attr_type_uninf"] = _per(mixed[1], i)
    c2 = {s: {} for s in SEEDS}
    claims = cr123_from_metrics(c1, c2, c3, variant=variant)
    return {c.id.split(" ")[0]: c.to_dict(list(SEEDS)) for c in claims}


def test_a_pt_model_that_ignores_the_demos_meets_the_variants_bound():
    # chance with shared tokens is about 0.42: far above 1/L + 0.05, but no contrast
    pt = ([0.42, 0.43, 0.41, 0.44, 0.42], [0.42, 0.42, 0.42, 0.43, 0.41])
    d = _claims(pt=pt)
    assert d["CR-1"]["verdict"] == HOLDS, d["CR-1"]["verdict_reason"]
    cond = d["CR-1"]["conditions"][1]
    assert cond["metric"] == "heldout_icl_type_over_bound" and cond["met"] is True
    assert d["CR-1"]["derived"]["3"]["heldout_icl_type_contrast"] == pytest.approx(0.01)
    assert d["CR-1"]["derived"]["3"]["heldout_icl_type_bound"] == pytest.approx(0.48)
    # the same numbers under the default task's formula: 0.42 > 1/L + 0.05
    assert _claims(variant="", pt=pt)["CR-1"]["verdict"] == NOT_HOLD


def test_a_variant_pt_model_with_a_contrast_of_0_2_does_not_hold():
    d = _claims(pt=(0.62, 0.42))["CR-1"]
    assert d["verdict"] == NOT_HOLD and "heldout_icl_type_over_bound" in d["verdict_reason"]
    assert d["conditions"][1]["value"] == pytest.approx(0.15)


def test_an_icl_finetuned_control_without_a_contrast_misbehaves():
    # one seed: the finetuned model is as right with uninformative demos as with real ones
    d = _claims(ft=([0.97, 0.97, 0.45, 0.97, 0.97], [0.12, 0.12, 0.42, 0.12, 0.12]))["CR-1"]
    assert d["verdict"] == INCONCLUSIVE and not d["holds"]
    assert "ICL-finetuned model" in d["verdict_reason"]
    ctrl = d["controls"][0]
    assert ctrl["metric"] == "ft_heldout_icl_type_over_bound" and ctrl["meets_rule"] is True
    assert ctrl["per_seed"]["2"] == pytest.approx(0.45 - 0.42 - 0.05)
    # its 0.45 is above 1/L + 0.05: the formula would have let it pass
    assert _claims(variant="", pt=(0.25, 0.25), ft=([0.97, 0.97, 0.45, 0.97, 0.97], 0.1))[
        "CR-1"]["verdict"] == HOLDS


def test_cr3_mixed_type_control_is_read_by_its_contrast():
    # the mixed-type finetune uses the demos: contrast 0.2 > 0.05 misbehaves
    d = _claims(mixed=(0.62, 0.42))["CR-3"]
    assert d["verdict"] == INCONCLUSIVE and "mixed-type demos" in d["verdict_reason"]
    # at chance with shared tokens (0.43 > 1/L + 0.05) but no contrast: as expected
    assert _claims(mixed=(0.43, 0.42))["CR-3"]["verdict"] == HOLDS
    assert _claims(variant="", mixed=(0.43, 0.42))["CR-3"]["verdict"] == INCONCLUSIVE


def test_not_measured_never_hides_a_failure():
    d = _claims(uninf=False)
    assert d["CR-1"]["verdict"] == INCONCLUSIVE
    assert d["CR-1"]["conditions"][1]["met"] is None
    assert "heldout_icl_type_over_bound cannot be read (no type accuracy with uninformative " \
           "demos" in d["CR-1"]["verdict_reason"]
    assert d["CR-3"]["verdict"] == INCONCLUSIVE  # the control has no number: no evidence
    # a readable failing condition decides whatever cannot be read
    d = _claims(uninf=False, typed=[0.99, 0.99, 0.9, 0.99, 0.99])["CR-1"]
    assert d["verdict"] == NOT_HOLD and "pt_typed_recall" in d["verdict_reason"]
    # the default task's bound needs no baseline
    assert _claims(variant="", pt=(0.25, None), uninf=False)["CR-1"]["verdict"] == HOLDS


@pytest.mark.parametrize("variant", ["", "shared"])
def test_redecide_derives_the_controls_under_the_claims_own_id(variant):
    ft = ([0.97, 0.97, 0.45, 0.97, 0.97], [0.12, 0.12, 0.42, 0.12, 0.12])
    stored = _claims(variant=variant, ft=ft, pt=(0.42, 0.42) if variant else (0.25, 0.25))
    for cid in ("CR-1", "CR-3"):
        full = f"{cid} {SHARED}" if variant else cid
        new = redecide_claim(full, stored[cid], list(SEEDS))
        assert new["verdict"] == stored[cid]["verdict"]
        assert [k["meets_rule"] for k in new["controls"]] == [
            k["meets_rule"] for k in stored[cid]["controls"]]
    assert stored["CR-1"]["verdict"] == (INCONCLUSIVE if variant else HOLDS)


# the registered rules before 2026-12-06, for the default task
_OLD = {
    "CR-1": ClaimSpec("CR-1", "old", conditions=(
        _c("pt_typed_recall", ">=", 0.95),
        _c("heldout_icl_best_attr_type", "<=", 0.30, rule="mean")),
        controls=(_neg("ICL-finetuned model", "ft_heldout_icl_best_attr_type", "<=", 0.30),)),
    "CR-3": ClaimSpec("CR-3", "old", conditions=(
        _c("heldout_icl_exact", ">=", 0.80, rule="mean"),),
        controls=(_neg("ICL+Grm finetuned on mixed-type demos",
                       "mixed_heldout_icl_best_attr_type", ">", 0.30),)),
}


@pytest.mark.parametrize("draw", range(40))
def test_the_default_task_is_decided_exactly_as_under_the_old_rule(draw):
    rng = np.random.default_rng(draw)

    def vals(lo, hi):  # some draws exactly on the bound 0.30
        v = rng.uniform(lo, hi, 5).round(3)
        v[rng.random(5) < 0.2] = 0.30
        return [float(x) for x in v]

    pt, ft, mixed = vals(0.2, 0.4), vals(0.25, 1.0), vals(0.2, 0.4)
    uninf = [float(x) for x in rng.uniform(0, 1, 5)]  # reported only in the default task
    new = _claims(variant="", pt=(pt, uninf), ft=(ft, uninf), mixed=(mixed, uninf),
                  typed=vals(0.93, 1.0))
    c1 = {s: {"pt_typed_recall": new["CR-1"]["per_seed"][s]["pt_typed_recall"],
              "heldout_icl_best_attr_type": pt[i], "ft_heldout_icl_best_attr_type": ft[i]}
          for i, s in enumerate(SEEDS)}
    c3 = {s: {"heldout_icl_exact": 0.9, "mixed_heldout_icl_best_attr_type": mixed[i]}
          for i, s in enumerate(SEEDS)}
    for cid, per in (("CR-1", c1), ("CR-3", c3)):
        old = Claim.from_spec(_OLD[cid], per, controls=spec_controls(_OLD[cid], per))
        assert old.to_dict(list(SEEDS))["verdict"] == new[cid]["verdict"], (cid, per)
