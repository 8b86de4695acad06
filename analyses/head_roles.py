"""Head roles by activation patching (CR-5) per checkpoint: type pairs (demos of another type)
and subject pairs (another query subject); names a Relation head and a Subject head.

    python analyses/head_roles.py out/runs/cr/seed0 --checkpoints phase:ft-icl --n 64

A recovery divides by the model's own source-minus-base logit difference; where that gap is
below --min-gap (the checkpoint barely tells the pair apart, e.g. before finetuning) or
negative (the source prompt does not prefer its own answer), the recovery is printed as n/a
(the JSON keeps the raw number and the gap; --csv holds the printed table).

A role is named only where its best head moves at least --role-threshold of the prompts'
answers to the source's (the moved share, CR-5's measure; default 0.5): otherwise the head is
"none" (the JSON keeps the best head as relation_top_head / subject_top_head). Over two
checkpoints or more head_roles_steps.png / .html draws both moved shares against training
step, phases in sequence.
"""

from _common import (
    CR,
    checkpoints,
    finite_float,
    open_run,
    parser,
    print_table,
    run_caption,
    run_main,
    save_json,
    save_step_figure,
    setup,
)

COLUMNS = {"checkpoint": "checkpoint", "step": "step",
           "relation_head": "Relation head", "relation_recovery": "Relation recovery",
           "relation_moved": "Relation moved share", "type_gap": "type-pair logit gap",
           "subject_head": "Subject head", "subject_recovery": "Subject recovery",
           "subject_moved": "Subject moved share", "subject_gap": "subject-pair logit gap",
           "distinct": "distinct heads"}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--min-gap", type=finite_float, default=0.5,
                    help="smallest source - base logit difference for which a recovery is "
                         "shown (default 0.5)")
    ap.add_argument("--role-threshold", type=finite_float, default=0.5,
                    help="smallest moved share for which a head is named Relation or Subject "
                         "head; below it the role's head is 'none' (default 0.5)")
    a = ap.parse_args()
    setup(a)
    run, _, task = open_run(a.run, CR, a.checkpoints)
    import numpy as np

    from mechinterp_icr.interp.cache import map_checkpoints
    from mechinterp_icr.interp.roles import make_pairs, pair_effects

    def verdict(ck, model):
        rng = np.random.default_rng([a.seed, 0x501E])
        t = pair_effects(model, *make_pairs(task, rng, a.n, "type"))
        s = pair_effects(model, *make_pairs(task, rng, a.n, "subject"))
        rel = int(np.argmax([r["recovery_all_pos"] for r in t]))
        sub = int(np.argmax([r["recovery_all_pos"] for r in s]))
        name = [f"L{r['layer']}H{r['head']}" for r in t]
        named = {role: name[i] if x[i]["moved_all_pos"] >= a.role_threshold else "none"
                 for role, i, x in (("relation", rel, t), ("subject", sub, s))}
        return {"relation_head": named["relation"], "relation_top_head": name[rel],
                "relation_recovery": t[rel]["recovery_all_pos"],
                "relation_moved": t[rel]["moved_all_pos"],
                "type_gap": t[0]["metric_source"] - t[0]["metric_base"],
                "subject_head": named["subject"], "subject_top_head": name[sub],
                "subject_recovery": s[sub]["recovery_all_pos"],
                "subject_moved": s[sub]["moved_all_pos"],
                "subject_gap": s[0]["metric_source"] - s[0]["metric_base"],
                "distinct": "none" not in named.values() and rel != sub}

    rows = []
    for name in checkpoints(run, a.checkpoints):
        rows += map_checkpoints(run, name, verdict)
    shown = []
    for r in rows:
        s = dict(r)
        for role, gap in (("relation", "type_gap"), ("subject", "subject_gap")):
            if not r[gap] >= a.min_gap:  # also a negative gap: no recovery to measure
                s[f"{role}_recovery"] = "n/a"
        shown.append(s)
    out = save_json(run, "head_roles", rows)  # raw recoveries, with their gaps
    print_table(shown, list(COLUMNS), COLUMNS, a.csv)
    print(f"recoveries where the logit gap is below {a.min_gap:g} are shown as n/a; "
          f"wrote {out}")
    print(f"a role's head is 'none' where no head moves {a.role_threshold:g} of the answers")
    save_step_figure(run, "head_roles", rows, {"Relation (type pairs), best head's moved share":
                                               "relation_moved",
                                               "Subject (subject pairs), best head's moved share":
                                               "subject_moved"},
                     f"Head roles against training step (CR {run_caption(run, a.checkpoints, rows)}"
                     f", {a.n} pairs)", "moved share (answers moved to the source's)",
                     y_range=(0, 1.02))
    big = [x for x in shown for k in ("relation_recovery", "subject_recovery")
           if isinstance(x[k], float) and not -0.2 <= x[k] <= 1.2]
    if big:
        print("a recovery above 1 (or below 0) is a real measurement: this head's source "
              "output alone moves the logit difference past the source prompt's own (or "
              "against it), since the heads' effects do not add up linearly; the moved share "
              "(prompts whose answer becomes the source's) stays in [0, 1], and CR-5 reads "
              "it (moved_gain)")


if __name__ == "__main__":
    run_main(main)
