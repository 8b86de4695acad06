"""Linear probes for the attribute type, with splits fixed before fitting and controls.

A probe is a multinomial logistic regression (sklearn, lbfgs, L2) on task vectors. Three
feature maps, each fitted on the TRAINING split only:

- ``pca``: the top ``n_pc`` principal components of the training vectors (the CR-4 probe: is
  the type in a *low-dimensional*, high-variance subspace?);
- ``full``: all d_model dimensions, standardised;
- ``random``: ``n_pc`` random orthonormal directions (the random-direction control: are the
  top PCs special, or would any ``n_pc`` directions do?).

Controls: the label-shuffle control gives every prompt a random label, the same in the
training and the test part, and fits and scores the same probe on them (it sits at chance
unless the split leaks); the random-direction control above.

Splits (:class:`Split`) are made before any fitting and are checked for leaks by
:func:`check_no_leak`: by prompt (identical token sequences are one prompt and never straddle
the split) or by subject (no subject, query or demonstration, appears on both sides).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mechinterp_icr.config import check, check_choice, check_range
from mechinterp_icr.interp.taskvec import pca

__all__ = [
    "LinearProbe",
    "ProbeLeakError",
    "Split",
    "check_no_leak",
    "choose_boundary",
    "evaluate_probes",
    "fit_probe",
    "probe_accuracy",
    "probe_layers",
    "random_dir_accuracy",
    "random_orthonormal",
    "split_by_prompt",
    "split_by_subject",
    "split_from_sets",
    "wilson_ci",
]


class ProbeLeakError(AssertionError):
    """Train and test share a prompt (or a subject, for a by-subject split)."""


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Split:
    """Indices into one array of prompts: ``train``, ``test`` (and optionally ``dev``)."""

    train: np.ndarray
    test: np.ndarray
    kind: str  # "prompt" | "subject" | "sets"
    dev: np.ndarray | None = None
    seed: int = 0

    def sizes(self) -> dict[str, int]:
        out = {"train": len(self.train), "test": len(self.test)}
        if self.dev is not None:
            out["dev"] = len(self.dev)
        return out


def _subject_matrix(query_subject, demo_subjects=None) -> np.ndarray:
    q = np.asarray(query_subject).reshape(-1, 1)
    if demo_subjects is None:
        return q
    d = np.asarray(demo_subjects)
    d = d.reshape(len(q), -1)
    return np.concatenate([q, d], axis=1)


def check_no_leak(split: Split, prompt_ids, subjects=None) -> None:
    """Raise ProbeLeakError if a prompt id (or, given ``subjects`` (N, S) with -1 padding, a
    subject) occurs in two of train / dev / test."""
    prompt_ids = np.asarray(prompt_ids)
    parts = {"train": split.train, "test": split.test}
    if split.dev is not None:
        parts["dev"] = split.dev
    names = list(parts)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ia, ib = np.asarray(parts[a]), np.asarray(parts[b])
            if np.intersect1d(ia, ib).size:
                raise ProbeLeakError(f"{a} and {b} share row indices")
            shared = np.intersect1d(prompt_ids[ia], prompt_ids[ib])
            if shared.size:
                raise ProbeLeakError(f"{a} and {b} share {shared.size} prompt(s) "
                                     f"(e.g. prompt id {int(shared[0])})")
            if subjects is not None:
                S = np.asarray(subjects)
                sa, sb = np.unique(S[ia]), np.unique(S[ib])
                sa, sb = sa[sa >= 0], sb[sb >= 0]
                both = np.intersect1d(sa, sb)
                if both.size:
                    raise ProbeLeakError(f"{a} and {b} share {both.size} subject(s) "
                                         f"(e.g. subject {int(both[0])})")


def split_by_prompt(prompt_ids, test_fraction: float = 0.3, dev_fraction: float = 0.0,
                    seed: int = 0, stratify=None) -> Split:
    """Random split of distinct prompts (rows with the same prompt id stay together).

    With ``stratify`` (one label per row, equal for rows of one prompt) the cut is made per
    label, so every part has the same label proportions. Without it, a label that happens to
    be over-represented in training is under-represented in test, which biases controls such
    as the label shuffle below chance.
    """
    check_range("test_fraction", test_fraction, 0, 1, lo_open=True, hi_open=True)
    check_range("dev_fraction", dev_fraction, 0, 1, hi_open=True)
    check(test_fraction + dev_fraction < 1, "test_fraction + dev_fraction",
          test_fraction + dev_fraction, "less than 1 (something must be left to train on)")
    prompt_ids = np.asarray(prompt_ids)
    uniq = np.unique(prompt_ids)
    check(len(uniq) >= 3, "prompts", len(uniq), "at least 3 distinct prompts")
    rng = np.random.default_rng([int(seed), 0x5B17])
    if stratify is None:
        groups = [uniq]
    else:
        lab = np.asarray(stratify)
        check(lab.shape == prompt_ids.shape, "stratify", lab.shape,
              f"one label per row, shape {prompt_ids.shape}")
        first = {}
        for pid, l in zip(prompt_ids.tolist(), lab.tolist()):
            check(first.setdefault(pid, l) == l, "stratify", "labels", "one label per prompt")
        plabel = np.array([first[p] for p in uniq.tolist()])
        groups = [uniq[plabel == l] for l in np.unique(plabel)]
    test_ids, dev_ids, train_ids = [], [], []
    for g in groups:
        perm = rng.permutation(g)
        n_test = max(1, int(round(test_fraction * len(g))))
        n_dev = max(1, int(round(dev_fraction * len(g)))) if dev_fraction > 0 else 0
        test_ids.append(perm[:n_test])
        dev_ids.append(perm[n_test:n_test + n_dev])
        train_ids.append(perm[n_test + n_dev:])
    test_ids, dev_ids, train_ids = (np.concatenate(x) for x in (test_ids, dev_ids, train_ids))
    check(len(train_ids) > 0, "prompts", len(uniq), "enough prompts to leave a training split")
    rows = np.arange(len(prompt_ids))
    split = Split(rows[np.isin(prompt_ids, train_ids)], rows[np.isin(prompt_ids, test_ids)],
                  "prompt", rows[np.isin(prompt_ids, dev_ids)] if dev_fraction > 0 else None,
                  seed)
    check_no_leak(split, prompt_ids)
    return split


def split_by_subject(query_subject, demo_subjects=None, test_fraction: float = 0.5,
                     seed: int = 0, prompt_ids=None) -> Split:
    """Partition the subjects at random, then keep prompts whose subjects (query and demos)
    all fall on one side; prompts mixing both sides are dropped."""
    check_range("test_fraction", test_fraction, 0, 1, lo_open=True, hi_open=True)
    S = _subject_matrix(query_subject, demo_subjects)
    subj = np.unique(S[S >= 0])
    check(len(subj) >= 2, "subjects", len(subj), "at least 2 distinct subjects")
    perm = np.random.default_rng([int(seed), 0x5B18]).permutation(subj)
    n_test = min(len(subj) - 1, max(1, int(round(test_fraction * len(subj)))))
    test_s = perm[:n_test]
    valid = S >= 0
    in_test = np.where(valid, np.isin(S, test_s), True).all(1)
    in_train = np.where(valid, ~np.isin(S, test_s), True).all(1)
    rows = np.arange(len(S))
    split = Split(rows[in_train], rows[in_test], "subject", None, seed)
    check(len(split.train) > 0 and len(split.test) > 0, "split_by_subject", split.sizes(),
          "prompts on both sides; use fewer demonstrations or generate the two sides "
          "from disjoint subject sets (split_from_sets)")
    check_no_leak(split, np.arange(len(S)) if prompt_ids is None else prompt_ids, S)
    return split


def split_from_sets(n_train: int, n_test: int, prompt_ids=None, subjects=None,
                    kind: str = "sets") -> Split:
    """Rows [0, n_train) train, [n_train, n_train + n_test) test: for two prompt sets made
    apart (e.g. finetune-subject prompts vs held-out-subject prompts). Checked for leaks."""
    split = Split(np.arange(n_train), np.arange(n_train, n_train + n_test), kind)
    ids = np.arange(n_train + n_test) if prompt_ids is None else np.asarray(prompt_ids)
    check_no_leak(split, ids, subjects)
    return split


# --------------------------------------------------------------------------------------------
# Probes
# --------------------------------------------------------------------------------------------
def random_orthonormal(d: int, k: int, seed: int = 0) -> np.ndarray:
    """(d, k) matrix with orthonormal columns, a pure function of ``seed``."""
    check_range("k", k, 1, d, integer=True)
    g = np.random.default_rng([int(seed), 0xD12]).standard_normal((d, k))
    q, r = np.linalg.qr(g)
    return q * np.sign(np.diag(r))[None, :]


@dataclass
class LinearProbe:
    kind: str
    mean: np.ndarray  # (d,)
    projection: np.ndarray | None  # (d, k) or None for the full probe
    scale_mean: np.ndarray
    scale_std: np.ndarray
    clf: Any

    def features(self, X) -> np.ndarray:
        Z = np.asarray(X, dtype=np.float64) - self.mean
        if self.projection is not None:
            Z = Z @ self.projection
        return (Z - self.scale_mean) / self.scale_std

    def predict(self, X) -> np.ndarray:
        return self.clf.predict(self.features(X))

    def accuracy(self, X, y) -> float:
        y = np.asarray(y)
        return float((self.predict(X) == y).mean()) if len(y) else float("nan")


_CONTROLLER = None


def _one_thread():
    """Limit BLAS/OpenMP to one thread (the controller is built once: building it scans the
    loaded libraries and costs milliseconds per call)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1)


PROBE_C = 1.0  # L2 regularisation (sklearn's C) of every probe a verdict reads
PROBE_MAX_ITER = 1000  # lbfgs iteration cap of every probe


def fit_probe(X, y, kind: str = "pca", n_pc: int = 3, C: float = PROBE_C, seed: int = 0,
              max_iter: int = PROBE_MAX_ITER) -> LinearProbe:
    """Multinomial logistic regression on the feature map ``kind`` fitted on (X, y) only."""
    from sklearn.linear_model import LogisticRegression

    check_choice("kind", kind, ["pca", "full", "random"])
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    check(X.ndim == 2 and len(X) == len(y) and len(X) >= 2, "X", X.shape,
          f"an (n, d) array with n = len(y) = {len(y)} >= 2")
    check(len(np.unique(y)) >= 2, "y", np.unique(y).tolist(), "at least two classes")
    mean = X.mean(0)
    Xc = X - mean
    proj = None
    if kind == "pca":
        check_range("n_pc", n_pc, 1, min(X.shape), integer=True)
        proj = pca(X, n_pc).components_.T  # (d, n_pc): the top PCs of the training vectors
    elif kind == "random":
        proj = random_orthonormal(X.shape[1], n_pc, seed)
    Z = Xc if proj is None else Xc @ proj
    mu, sd = Z.mean(0), Z.std(0)
    sd = np.where(sd > 1e-12, sd, 1.0)
    clf = LogisticRegression(C=C, max_iter=max_iter)
    # these problems are tiny: BLAS threads only add overhead (and contend on a shared CPU)
    with warnings.catch_warnings(), _one_thread():
        warnings.simplefilter("ignore")  # ConvergenceWarning on separable data is harmless
        clf.fit((Z - mu) / sd, y)
    return LinearProbe(kind, mean, proj, mu, sd, clf)


def probe_accuracy(X, y, split: Split, kind: str = "pca", n_pc: int = 3, seed: int = 0,
                   shuffle_labels: bool = False, on: str = "test", n_shuffles: int = 16,
                   prompt_ids=None) -> float:
    """Fit on ``split.train``, score on ``on`` (``test`` or ``dev``).

    With ``shuffle_labels`` (the label-shuffle control) every prompt gets a random label,
    the SAME one in the training and the scored part: the labels of all prompts are permuted
    together, and identical prompts (same ``prompt_ids``; default every row its own prompt)
    share the label of their first copy. The probe is fitted and scored on these labels, so
    it is at chance unless the split leaks (a prompt, or a near copy, on both sides). The
    accuracy is averaged over ``n_shuffles`` permutations (on clustered data one permutation
    is noisy). Permuting only the training labels and scoring on the true labels would not
    test the split: the probe would be at chance by construction, whatever the split.
    """
    X = np.asarray(X)
    y = np.asarray(y)
    rows = split.test if on == "test" else split.dev
    check(rows is not None, "on", on, "a part the split has (test, or dev when made)")
    if not shuffle_labels:
        return fit_probe(X[split.train], y[split.train], kind, n_pc, seed=seed).accuracy(
            X[rows], y[rows])
    check_range("n_shuffles", n_shuffles, 1, 10_000, integer=True)
    ids = np.arange(len(y)) if prompt_ids is None else np.asarray(prompt_ids).reshape(-1)
    check(len(ids) == len(y), "prompt_ids", len(ids), f"one id per prompt ({len(y)})")
    _, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    accs = []
    for i in range(n_shuffles):
        yp = np.random.default_rng([int(seed), 0x5AFF, i]).permutation(y)[first][inv]
        if len(np.unique(yp[split.train])) < 2:
            continue
        accs.append(fit_probe(X[split.train], yp[split.train], kind, n_pc, seed=seed)
                    .accuracy(X[rows], yp[rows]))
    return float(np.mean(accs)) if accs else float("nan")


def random_dir_accuracy(X, y, split: Split, n_pc: int = 3, seed: int = 0, on: str = "test",
                        n_draws: int = 1) -> float:
    """The random-direction control: the probe on ``n_pc`` random orthonormal directions,
    averaged over ``n_draws`` independent draws (one draw is noisy)."""
    check_range("n_draws", n_draws, 1, 10_000, integer=True)
    return float(np.mean([probe_accuracy(X, y, split, "random", n_pc,
                                         int(seed) * 1000 + j if j else seed, on=on)
                          for j in range(n_draws)]))


def evaluate_probes(X, y, split: Split, n_pc: int = 3, seed: int = 0,
                    on: str = "test", n_shuffles: int = 16, n_random: int = 1,
                    prompt_ids=None) -> dict[str, float]:
    """Top-PC probe, full probe, and the two controls on one split (``n_random`` draws of
    random directions, averaged; the label shuffle per prompt, ``prompt_ids``)."""
    y = np.asarray(y)
    rows = split.test if on == "test" else split.dev
    n_classes = len(np.unique(y))
    test_y = y[rows]
    majority = float(np.bincount(np.searchsorted(np.unique(y), test_y)).max() / len(test_y))
    return {
        "acc_pc": probe_accuracy(X, y, split, "pca", n_pc, seed, on=on),
        "acc_full": probe_accuracy(X, y, split, "full", n_pc, seed, on=on),
        "acc_shuffle_pc": probe_accuracy(X, y, split, "pca", n_pc, seed, True, on, n_shuffles,
                                         prompt_ids),
        # full-dimensional vectors are less clustered, so fewer permutations suffice there
        "acc_shuffle_full": probe_accuracy(X, y, split, "full", n_pc, seed, True, on,
                                           max(1, n_shuffles // 4), prompt_ids),
        "acc_random_dir": random_dir_accuracy(X, y, split, n_pc, seed, on, n_random),
        "chance": 1.0 / n_classes,
        "majority": majority,
        "n_train": len(split.train),
        "n_test": len(rows),
    }


def probe_layers(vectors: np.ndarray, y, split: Split, layer_names: Sequence[str],
                 n_pc: int = 3, seed: int = 0, on: str = "test",
                 controls: bool = True) -> list[dict[str, Any]]:
    """One row per boundary: probes (and controls) on ``vectors[:, b]`` (N, B, d)."""
    rows = []
    for b, name in enumerate(layer_names):
        X = vectors[:, b]
        if controls:
            r = evaluate_probes(X, y, split, n_pc, seed, on)
        else:
            r = {"acc_pc": probe_accuracy(X, y, split, "pca", n_pc, seed, on=on)}
        rows.append({"boundary": b, "hook": name, **r})
    return rows


def choose_boundary(rows: Sequence[dict[str, Any]], metric: str = "acc_pc") -> int:
    """Boundary with the best ``metric`` (ties: the earliest), from rows scored on a dev set."""
    check(len(rows) > 0, "rows", rows, "at least one boundary row")
    vals = [r[metric] for r in rows]
    return int(rows[int(np.argmax(vals))]["boundary"])


def wilson_ci(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n."""
    if n <= 0:
        return (float("nan"), float("nan"))
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, centre - half), min(1.0, centre + half))
