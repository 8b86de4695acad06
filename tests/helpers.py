"""Test builders (SAELens style: ``build_*(**overrides)``) and tiny configurations shared by
several test files. Tests import from here, never from each other."""

import json


def build_model_cfg(**overrides):
    from mechinterp_icr.config import ModelConfig

    base = dict(n_layers=2, n_heads=1, d_model=32, d_head=32, d_mlp=64, attn_only=True,
                d_vocab=17, n_ctx=17)
    base.update(overrides)
    return ModelConfig(**base)


def build_train_cfg(**overrides):
    from mechinterp_icr.config import TrainConfig

    base = dict(steps=60, batch_size=32, lr=3e-3, eval_every=0, progress=False,
                checkpoint_schedule="linear", checkpoint_every=20)
    base.update(overrides)
    return TrainConfig(**base)


# A tiny CR configuration (``--set`` items for the quick profile): every stage, CR-1 .. CR-7,
# runs in seconds on one core. CR-4 has no lam sweep, CR-7 a short cascade.
CR_TINY = [
    "task.n_subjects=16", "task.n_grammar=4", "task.n_types=2", "task.n_values=4",
    "task.n_tuples=3", "task.n_demos=2", "task.max_demos=3", "task.grammar_len_max=3",
    "model.d_model=32", "model.d_head=32", "model.d_mlp=64", "model.n_ctx=0",
    "pretrain.steps=300", "pretrain.lr=0.005", "pretrain.batch_size=64",
    "finetune.steps=80", "finetune.lr=0.005", "finetune.batch_size=64",
    "finetune.checkpoint_dense_until=3",
    "eval_n=128", "ckpt_eval_n=32", "eval_ks=[1,2,3]", "allweights_arm=true",
    "sweep=[\"default|\",\"type chain|task.iclgrm_chain=type\",\"sga|task.order=sga\"]",
    "sweep_seeds=1",
    "taskvec.n_heldout=160", "taskvec.n_finetune=120", "taskvec.n_subject_split=80",
    "taskvec.n_shuffles=2", "taskvec.ks=[1,2]", "taskvec.n_per_k=80", "taskvec.lams=[]",
    "taskvec.curve_max_checkpoints=2",
    "mechanism.n_pairs=16", "mechanism.role_checkpoints=2",
    "cascade.d_model=32", "cascade.d_head=16", "cascade.pt_steps=150", "cascade.ft_steps=30",
    "cascade.ft_lr=0.006", "cascade.ft_trainable=all", "cascade.dense_until=0",
    "cascade.checkpoint_every=3", "cascade.probe_batch=32",
]


# A tiny IR configuration (every stage, seconds on one core).
IR_TINY = ["n=16", "N=32", "steps=20", "stop_every=10", "stop_max=40", "gd_sym_steps=20",
           "eval_size=200", "final_eval=300", "escape_eval=50", "gap_n=[16]",
           "sample_complexity.n=[8,16]", "sample_complexity.Ns=[1,2]",
           "sample_complexity.runs=1", "sample_complexity.plateau_runs=1",
           "sample_complexity.learned_runs=1", "sample_complexity.learned_N_max=64",
           "sample_complexity.steps=5", "sample_complexity.eval=50",
           "three_pairs.n=16", "three_pairs.N=32", "pretrained.n=8", "pretrained.steps=5",
           "pretrained.N=16", "pretrained.ft_steps=5", "hooked.n=8", "hooked.steps=3",
           "hooked.dense=2", "hooked.N=16", "hooked.eval=32", "induction.steps=3",
           "induction.tokens=8", "induction.length=12", "induction.probes=8", "overwrite_n=16"]


def build_induction_patching_case(steps: int = 150):
    """A tiny trained 2-layer attention-only induction model, clean and corrupted prompts (the
    first half's tokens replaced, so the induction answers change) and the logit difference at
    the second half's last position: ``(model, clean, corrupted, metric)``."""
    import numpy as np
    import torch

    from mechinterp_icr.interp import patching as P
    from mechinterp_icr.training.loop import batch_rng
    from mechinterp_icr.training.toy import tiny_induction_model

    model, task = tiny_induction_model(n_layers=2, n_heads=2, steps=steps)
    clean = task.sample(batch_rng(1, "t", 0), 8).tokens
    corr = clean.clone()
    h = task.cfg.half_len
    corr[:, 1:h + 1] = torch.from_numpy(np.random.default_rng(0).integers(1, 17, (8, h)))
    pos = 2 * h - 1
    metric = P.logit_diff_metric(pos, clean[:, pos + 1], corr[:, h])
    return model, clean, corr, metric


def comparable_summary(data: dict, out_dir, drop_keys=(), drop_tables=()) -> dict:
    """A summary's claims and tables without what differs between runs by nature: keys in
    ``drop_keys`` (timings), tables in ``drop_tables``, ``out_dir`` in strings, NaN."""
    import math

    def norm(x):
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items() if k not in drop_keys}
        if isinstance(x, list):
            return [norm(v) for v in x]
        if isinstance(x, str):
            return x.replace(str(out_dir), "<out>")
        if isinstance(x, float) and math.isnan(x):
            return "nan"
        return x

    tables = {k: v for k, v in data["tables"].items() if k not in drop_tables}
    return norm({"claims": data["claims"], "tables": tables})


def load_repo_script(rel: str, monkeypatch):
    """Load a script of the repository (``probes/``, ``analyses/``, ``benchmarks/``) as a
    module; its folder goes on ``sys.path`` for the test (analyses/ scripts import _common)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / rel
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem + "_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _side(cond, meet: bool, i: int) -> float:
    """A value of ``cond``'s metric on seed ``i`` that meets (or fails) ``metric op threshold``
    with a margin, a little different on every seed."""
    thr, step = cond.threshold, 0.05 * max(1.0, abs(cond.threshold))
    up = cond.op in (">=", ">")
    sign = 1.0 if up == meet else -1.0
    return thr + sign * (step + 0.001 * i)


# measured values from which a spec's derive computes a metric its rule reads (or its
# unreadable hook decides what can be read), chosen so every condition is met and readable and
# every derived control behaves: CR-2's held-out ICL curve over K
# (rising), CR-8's partial eta^2 curves (the finetuned model rising above a flat mixed-type
# finetune, the PT-only model flat with it) and headroom at K = 1
_KS = ("1", "2", "3", "4", "6", "8")
DERIVE_INPUTS = {
    # CR-1 / CR-3: the type of the best attribute guess, from which the type over its bound is
    # derived (the PT-only model and the mixed-type finetune under it, the ICL-finetuned model
    # over it)
    "CR-1": {"heldout_icl_best_attr_type": 0.25, "ft_heldout_icl_best_attr_type": 0.99},
    "CR-3": {"mixed_heldout_icl_best_attr_type": 0.25},
    "CR-2": {"heldout_icl_exact_by_K": {str(k): 0.9 + 0.01 * k for k in range(1, 9)}},
    # CR-7: the arm statistics on the synthetic mutual coupling (it fails (iv) and (v))
    "CR-7": {"placebo_mutual_kq_preset_speedup": 20.0, "placebo_mutual_kq_frozen_speedup": 0.38},
    "CR-8": {"ft_partial_eta2_by_k": {k: 0.3 + 0.1 * i for i, k in enumerate(_KS)},
             "mixed_partial_eta2_by_k": dict.fromkeys(_KS, 0.3),
             "pt_partial_eta2_by_k": dict.fromkeys(_KS, 0.3),
             "ft_output_type_acc_k1": 0.6},
    # CR-9: rising from lam_s = 0.1 (the first lam whose ICL reaches 0.80), the control flat
    "CR-9": {"ft_eta2_by_lam": {"0": 0.2, "0.1": 0.4, "0.2": 0.5, "0.3": 0.55, "0.9": 0.7},
             "mixed_eta2_by_lam": dict.fromkeys(("0", "0.1", "0.2", "0.3", "0.9"), 0.2),
             "ft_icl_exact_by_lam": {"0": 0.3, "0.1": 0.85, "0.2": 0.9, "0.3": 0.95,
                                     "0.9": 0.97}},
    # IR-8 is read only on a token-dependent model that solves the task
    "IR-8": {"tok_solved": 1.0, "tok_query_seen_before": 0.0},
    # IR-9 is read only where an offset was imposed
    "IR-9": {"ir9_imposed": 1.0},
}


def registry_summary(seeds=(0, 1, 2, 3, 4), registry=None) -> dict:
    """A summary.json of every registered claim built from synthetic measurements: every
    condition met and every control as expected on every seed (so every claim holds), through
    the same Claim / Summary code a reproduction uses. For tests that need a whole summary
    without reading committed results."""
    from mechinterp_icr.claims import Claim, Summary, evaluate_control
    from mechinterp_icr.claims.registry import REGISTRY

    registry = REGISTRY if registry is None else registry
    summary = Summary("cr,ir", "quick", list(seeds))
    summary.echo = False
    for spec in registry.values():
        per_seed = {str(s): {c.metric: _side(c, True, i) for c in spec.conditions}
                    for i, s in enumerate(seeds)}
        for m in per_seed.values():  # the curves a spec's derive reads
            m.update(DERIVE_INPUTS.get(spec.id, {}))
        derived = spec.derive(spec.id, per_seed)[0] if spec.derive is not None else {}
        controls = [evaluate_control(cs, {
            str(s): (derived[str(s)][cs.condition.metric]
                     if cs.condition.metric in derived.get(str(s), {})
                     else _side(cs.condition, cs.kind == "positive", i))
            for i, s in enumerate(seeds)}) for cs in spec.controls]
        summary.add(Claim.from_spec(spec, per_seed, controls=controls))
    return json.loads(json.dumps(summary.to_dict()))


def build_ir5_seed(N_memory=None, N_learned=None, *, ns=(128, 256, 512, 1024, 2048, 4096),
                   P=0.92, z_memory=0.35, z_learned=0.004, ceiling=0.95, retrieval=1.0,
                   memory_Ns=(1, 2, 4, 8, 16, 32, 64, 128, 256), learned_top=8192,
                   plateau=None):
    """One seed's stored IR-5 runs (``ir5_by_n``) whose half-gain N is ``N_memory(n)`` /
    ``N_learned(n)`` (default: flat 2 for the memory arm, n for the learned one; None: never
    reached). Each arm's accuracy is z + (P - z) x min(1, N / (2 N(n))), so the isotonic fit
    crosses the q = 0.5 target exactly at N(n); ``plateau`` (N -> accuracy) overrides the
    memory arm's accuracy at its largest N."""
    N_memory = N_memory or (lambda n: 2.0)
    N_learned = N_learned or (lambda n: float(n))

    def acc(Ns, z, half, runs):
        return {str(N): [z + (P - z) * (min(1.0, N / (2 * half)) if half else 0.4)] * runs(N)
                for N in Ns}

    from mechinterp_icr.claims.ir_registry import IR5

    def mem_runs(N):  # the registered run counts: more at the two largest N (the plateau)
        return IR5["sample_complexity.plateau_runs" if N in sorted(memory_Ns)[-2:]
                   else "sample_complexity.runs"]

    by_n = {}
    for n in ns:
        mem = acc(memory_Ns, z_memory, N_memory(n), mem_runs)
        if plateau:
            mem.update({str(N): [v] * mem_runs(N) for N, v in plateau.items()})
        lrn = acc([2 ** k for k in range(14) if 2 ** k <= learned_top], z_learned, N_learned(n),
                  lambda N: IR5["sample_complexity.learned_runs"])
        by_n[str(n)] = {"d": n // 2, "ceiling": ceiling, "retrieval": retrieval,
                        "memory": {"z": z_memory, "acc": mem},
                        "learned": {"z": z_learned, "acc": lrn}}
    return {"ir5_by_n": by_n}


# IR-5 decides on its stored runs: a flat memory arm and a linear learned one
DERIVE_INPUTS["IR-5"] = build_ir5_seed()
