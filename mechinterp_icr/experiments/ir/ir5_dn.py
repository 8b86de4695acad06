"""IR-5's embedding width d(n), chosen from the memory's retrieval alone: no finetuning,
no N.

For each n, d(n) is the smallest width on the grid ``DN_STEP, 2 DN_STEP, ...`` (below n) at
which the constructed memory over random unit embeddings of that width retrieves at least
``dn_min`` of the triples in **both** directions (s, a -> r up to ties; s, r -> a; IR-1's
measure, :func:`~mechinterp_icr.models.ir.memory_retrieval`) on **every** selection seed.
The selection seeds are a block no verdict is decided on (:data:`DN_SELECTION_SEEDS`), so
the decision seeds check the precondition (``sample_complexity.retrieval_min``) on draws
the choice never saw. The registered table is ``IRConfig.sample_complexity.d`` (aligned with
``sample_complexity.d_n``); this module recomputes it::

    python -m mechinterp_icr.experiments.ir.ir5_dn --n 128,256,512 --seeds 100-109

prints one JSON line per (n, d) tried and the table, and exits 1 when the table differs from
the registered one for the n given (nothing is written).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import torch

from mechinterp_icr.experiments.ir.config import QUICK, IRConfig, model_spec, task_config
from mechinterp_icr.models.ir import memory_retrieval, token_embeddings

__all__ = ["DN_MIN", "DN_SELECTION_SEEDS", "DN_STEP", "choose_d", "d_grid", "retrieval_at",
           "main"]

DN_STEP = 16  # the grid of widths: multiples of 16 below n
DN_MIN = 0.995  # retrieval every selection seed must reach (the precondition 0.99 + margin)
DN_SELECTION_SEEDS = tuple(range(100, 110))  # seeds no IR verdict is decided on


def d_grid(n: int, step: int = DN_STEP) -> list[int]:
    """Candidate widths d < n: ``step, 2 step, ...``."""
    return list(range(step, n, step))


@torch.no_grad()
def retrieval_at(cfg: IRConfig, n: int, d: int, seed: int) -> dict[str, float]:
    """Retrieval of the constructed memory over random unit embeddings of width ``d`` at
    ``n`` subjects (IR-1's measure, on a seeded sample of
    ``sample_complexity.retrieval_triples`` triples, every triple when fewer):
    ``relation_acc``, ``answer_acc`` and their minimum ``retrieval``. The same call the
    IR-5 sweep row makes (:mod:`.ir5`)."""
    spec = model_spec(cfg, embedding="random", d_embed=d)
    task = task_config(cfg, n).build(seed)
    E = token_embeddings(task, spec, seed)
    m = memory_retrieval(task, spec, None, E,
                         max_triples=cfg.sample_complexity.retrieval_triples)
    return {**m, "retrieval": min(m.values())}


def choose_d(cfg: IRConfig, n: int, seeds=DN_SELECTION_SEEDS, dn_min: float = DN_MIN,
             step: int = DN_STEP, log=None) -> dict[str, Any]:
    """The smallest grid width d < n whose retrieval is >= ``dn_min`` on every seed of
    ``seeds`` (a width is abandoned at its first failing seed). Returns ``{"n", "d"
    (None: no width below n qualifies), "min_retrieval", "per_seed", "tried"}``."""
    tried = []
    for d in d_grid(n, step):
        per = {}
        for s in seeds:
            per[str(s)] = retrieval_at(cfg, n, d, s)["retrieval"]
            if per[str(s)] < dn_min:
                break
        row = {"n": n, "d": d, "min_retrieval": min(per.values()), "per_seed": per,
               "qualifies": len(per) == len(seeds) and min(per.values()) >= dn_min}
        tried.append(row)
        if log:
            log(row)
        if row["qualifies"]:
            return {"n": n, "d": d, "min_retrieval": row["min_retrieval"], "per_seed": per,
                    "tried": tried}
    return {"n": n, "d": None, "min_retrieval": None, "per_seed": {}, "tried": tried}


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", default=",".join(map(str, QUICK.sample_complexity.n)))
    p.add_argument("--seeds", default=f"{DN_SELECTION_SEEDS[0]}-{DN_SELECTION_SEEDS[-1]}")
    p.add_argument("--min", type=float, default=DN_MIN, dest="dn_min")
    p.add_argument("--step", type=int, default=DN_STEP)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    cfg = QUICK
    registered = dict(zip(cfg.sample_complexity.d_n, cfg.sample_complexity.d))
    table, same = {}, True
    for n in [int(x) for x in a.n.split(",")]:
        t = time.perf_counter()
        res = choose_d(cfg, n, _seeds(a.seeds), a.dn_min, a.step,
                       log=lambda r: print(json.dumps(r), flush=True))
        table[n] = res["d"]
        same &= registered.get(n) == res["d"]
        print(json.dumps({"n": n, "chosen_d": res["d"], "min_retrieval": res["min_retrieval"],
                          "registered_d": registered.get(n),
                          "seconds": round(time.perf_counter() - t, 1)}), flush=True)
    print(json.dumps({"d_of_n": table, "matches_registered": same}))
    return 0 if same else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
