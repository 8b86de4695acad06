"""Task vectors: the residual stream at the query position, at every layer boundary.

For an ICL prompt ``[BOS] s1 a1 [SEP] ... sK aK [SEP] sq`` the *task vector* (Hendel et al.)
is the hidden state at the position that predicts the answer (the query subject ``sq``, the
last token). We read it at every layer boundary of a HookedTransformer:

    boundary 0      blocks.0.hook_resid_pre   (= hook_embed + hook_pos_embed)  # (B, T, d_model)
    boundary l+1    blocks.{l}.hook_resid_post                                 # (B, T, d_model)

so a model with ``n_layers`` layers has ``n_layers + 1`` boundaries. Extraction is one batched
``run_with_cache`` per chunk of prompts with a names filter (only these hooks are stored).

Geometry (all deterministic): PCA (:func:`pca`, the package's one PCA: sklearn's with the full
SVD solver, whose sign convention makes the largest loading of each component positive; the
probes' top-PC feature map uses it too), explained variance, participation ratio, number of
components for 90% variance,
within- vs between-type cosine similarity, silhouette, and the fraction of variance explained
by the type (``type_variance_fraction``, the between-type share of the total variance; the
scalar "separation" used by the K and ``lam`` sweeps). UMAP is optional (``umap_embed``) and
never imported on the quick path.

Causal check (``transplant_accuracy``): add the difference of mean task vectors (type ``l'``
minus type ``l``; ``mode='add'``), a random vector of the same norm (``mode='random'``, the
control) or write the mean task vector of ``l'`` (``mode='replace'``) into a type-``l`` prompt
at one hook of the query position, and count how often the answer becomes the query
subject's ``l'`` attribute. Necessity (``subspace_mean_replace_predictions``): replace the
component of the query-position activation in a subspace U (:func:`type_subspace`, the span of
the type-mean differences; or :func:`random_subspace`, the control) by the training mean's
component and read the model's answers.

Partial eta^2 (:func:`partial_type_variance_fraction`): the type's share of the variance left
once the query subject's own contribution is removed, SS_type / (SS_type + SS_residual) in the
additive type + subject decomposition (least squares on one-hot codes).

CR-4 reads the code at :func:`readout_hook` (``blocks.{n-1}.hook_resid_mid``: after the last
attention layer, before the last MLP), never at the final residual stream, whose type is
the model's own prediction (:func:`output_type_accuracy`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, check, check_choice, check_range

__all__ = [
    "TaskVectorSet",
    "boundary_labels",
    "boundary_names",
    "class_means",
    "cosine_within_between",
    "extract_task_vectors",
    "geometry",
    "icl_task_vectors",
    "iter_checkpoint_task_vectors",
    "n_components_for",
    "participation_ratio",
    "output_type_accuracy",
    "partial_type_variance_fraction",
    "pca",
    "random_subspace",
    "subspace_mean_replace_predictions",
    "prompt_keys",
    "readout_hook",
    "readout_names",
    "silhouette",
    "transplant_accuracy",
    "type_subspace",
    "type_variance_fraction",
    "umap_embed",
    "write_hook",
]


# --------------------------------------------------------------------------------------------
# Layer boundaries
# --------------------------------------------------------------------------------------------
def boundary_names(n_layers: int) -> list[str]:
    """Hook names of the ``n_layers + 1`` residual-stream boundaries, embedding first."""
    check_range("n_layers", n_layers, 1, 10_000, integer=True)
    return ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(n_layers)]


def boundary_labels(n_layers: int) -> list[str]:
    """Readable names of the boundaries: ``embed``, ``L0``, ``L1``, ... (after block l)."""
    return ["embed"] + [f"L{l}" for l in range(n_layers)]


def readout_hook(n_layers: int) -> str:
    """The CR-4 read-out hook ``blocks.{n_layers-1}.hook_resid_mid``: after the last attention
    layer, before the last MLP (the last layer has not read the code out yet)."""
    check_range("n_layers", n_layers, 1, 10_000, integer=True)
    return f"blocks.{n_layers - 1}.hook_resid_mid"


def write_hook(n_layers: int) -> str:
    """``blocks.{n_layers-1}.hook_attn_out``: what the last attention layer writes into the
    read-out hook (``resid_mid = resid_pre + attn_out``), without the query token's own
    residual. A diagnostic beside CR-4, never the claim's hook."""
    check_range("n_layers", n_layers, 1, 10_000, integer=True)
    return f"blocks.{n_layers - 1}.hook_attn_out"


def readout_names(n_layers: int) -> tuple[list[str], list[str]]:
    """(hook names, labels) of every boundary plus the read-out hook, in forward order:
    ``embed, L0, .., L{n-2}, L{n-1}.mid, L{n-1}`` (the last one is the final residual
    stream, the model's own prediction)."""
    names, labels = boundary_names(n_layers), boundary_labels(n_layers)
    return (names[:-1] + [readout_hook(n_layers), names[-1]],
            labels[:-1] + [f"L{n_layers - 1}.mid", labels[-1]])


def prompt_keys(tokens: np.ndarray) -> np.ndarray:
    """One integer id per distinct token sequence (identical prompts share an id)."""
    tokens = np.ascontiguousarray(np.asarray(tokens))
    _, inv = np.unique(tokens, axis=0, return_inverse=True)
    return np.asarray(inv).reshape(-1)


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------
@dataclass
class TaskVectorSet:
    """Task vectors of N prompts at every boundary, with the labels of each prompt.

    ``vectors[n, b]`` is the residual stream of prompt n at boundary b at its query position.
    """

    vectors: np.ndarray  # (N, n_boundaries, d_model) float32
    layer_names: list[str]
    types: np.ndarray  # (N,) attribute type of the prompt
    query_subject: np.ndarray  # (N,) subject index of the query
    demo_subjects: np.ndarray  # (N, K) subject indices of the demonstrations
    answer: np.ndarray  # (N,) answer token id
    pred: np.ndarray  # (N,) argmax token id of the model at the query position
    tokens: np.ndarray  # (N, T) prompts (to detect duplicates across splits)
    K: int = 0
    checkpoint: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    query_pos: np.ndarray | None = None  # (N,) position of the query in ``tokens``

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def n_boundaries(self) -> int:
        return int(self.vectors.shape[1])

    def at(self, boundary: int | str) -> np.ndarray:
        """(N, d_model) task vectors at one boundary (index or hook name)."""
        if isinstance(boundary, str):
            check(boundary in self.layer_names, "boundary", boundary,
                  f"one of {self.layer_names}")
            boundary = self.layer_names.index(boundary)
        check_range("boundary", boundary, -self.n_boundaries, self.n_boundaries - 1,
                    integer=True)
        return self.vectors[:, boundary]

    @property
    def accuracy(self) -> float:
        """Exact accuracy of the model's own answer at the query position."""
        return float((self.pred == self.answer).mean()) if len(self) else float("nan")

    def prompt_ids(self) -> np.ndarray:
        """One id per distinct (prompt tokens, type): in the shared-token variant one token
        sequence can be a prompt of two types (each demo's attribute token shared by both), and
        those are two prompts. Where the tokens fix the type (the default task) these are the
        ids of the token sequences alone (the type is the last sort key)."""
        return prompt_keys(np.concatenate([np.asarray(self.tokens),
                                           np.asarray(self.types)[:, None]], 1))

    def subset(self, idx) -> TaskVectorSet:
        idx = np.asarray(idx)
        return TaskVectorSet(self.vectors[idx], list(self.layer_names), self.types[idx],
                             self.query_subject[idx], self.demo_subjects[idx], self.answer[idx],
                             self.pred[idx], self.tokens[idx], self.K, self.checkpoint,
                             dict(self.meta),
                             None if self.query_pos is None else self.query_pos[idx])

    @staticmethod
    def concat(sets: Sequence[TaskVectorSet]) -> TaskVectorSet:
        check(len(sets) > 0, "sets", sets, "at least one TaskVectorSet")
        T = max(s.tokens.shape[1] for s in sets)
        toks = [np.pad(s.tokens, ((0, 0), (0, T - s.tokens.shape[1]))) for s in sets]
        Kd = max(s.demo_subjects.shape[1] for s in sets)
        demos = [np.pad(s.demo_subjects, ((0, 0), (0, Kd - s.demo_subjects.shape[1])),
                        constant_values=-1) for s in sets]
        return TaskVectorSet(
            np.concatenate([s.vectors for s in sets]), list(sets[0].layer_names),
            np.concatenate([s.types for s in sets]),
            np.concatenate([s.query_subject for s in sets]), np.concatenate(demos),
            np.concatenate([s.answer for s in sets]), np.concatenate([s.pred for s in sets]),
            np.concatenate(toks), sets[0].K, sets[0].checkpoint, dict(sets[0].meta),
            None if any(s.query_pos is None for s in sets)
            else np.concatenate([s.query_pos for s in sets]))


@torch.no_grad()
def extract_task_vectors(model, tokens: torch.Tensor, query_pos: torch.Tensor,
                         names: Sequence[str] | None = None,
                         batch_size: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """Residual stream at ``query_pos`` for every hook in ``names`` (default: all boundaries).

    Returns ``(vectors (N, len(names), d_model) float32, pred (N,) argmax token at query_pos)``.
    One ``run_with_cache`` per chunk of ``batch_size`` prompts, caching only ``names``.
    """
    names = list(names or boundary_names(model.cfg.n_layers))
    check(tokens.ndim == 2, "tokens", tuple(tokens.shape), "a (batch, pos) tensor")
    check(query_pos.shape == (tokens.shape[0],), "query_pos", tuple(query_pos.shape),
          f"shape ({tokens.shape[0]},), one position per prompt")
    check(bool((query_pos >= 0).all() and (query_pos < tokens.shape[1]).all()), "query_pos",
          "out of range", f"positions in [0, {tokens.shape[1] - 1}]")
    name_set = set(names)
    dev = next(model.parameters()).device
    outs, preds = [], []
    for i in range(0, tokens.shape[0], batch_size):
        tok = tokens[i:i + batch_size].to(dev)  # (b, T)
        qp = query_pos[i:i + batch_size].to(dev).long()  # (b,)
        logits, cache = model.run_with_cache(tok, names_filter=lambda n: n in name_set)
        rows = torch.arange(tok.shape[0], device=dev)
        outs.append(torch.stack([cache[n][rows, qp] for n in names], dim=1).float().cpu())
        preds.append(logits[rows, qp].argmax(-1).cpu())  # (b,)
    return torch.cat(outs).numpy(), torch.cat(preds).numpy()


def _sample_icl(task, rng, n, K, subjects, types, grammar):
    kw = dict(K=K, subjects=subjects, grammar=grammar)
    if types is not None:
        kw["types"] = types
    return task.sample_icl(rng, n, **kw)


def icl_task_vectors(model, task, n: int, K: int | None = None, subjects=None, seed: int = 0,
                     types=None, grammar: bool = False, batch_size: int = 512,
                     checkpoint: str = "", names: Sequence[str] | None = None
                     ) -> TaskVectorSet:
    """Task vectors of ``n`` fresh ICL prompts of ``task`` (all types unless ``types``).

    ``subjects`` restricts demos and query (e.g. ``task.heldout_subjects``); the prompts are
    a pure function of ``seed``, so two checkpoints see the same prompts. ``names``: the hooks
    to read (default: every boundary, :func:`boundary_names`).
    """
    check_range("n", n, 1, 10_000_000, integer=True)
    rng = np.random.default_rng([int(seed), 0x7A5C])
    b = _sample_icl(task, rng, n, K, subjects, types, grammar)
    meta = b.meta
    qp = torch.as_tensor(meta["query_pos"]).long()
    names = list(names or boundary_names(model.cfg.n_layers))
    vecs, pred = extract_task_vectors(model, b.tokens, qp, names, batch_size=batch_size)
    demos = torch.as_tensor(meta["demo_subjects"]).long().numpy()
    if demos.ndim == 1:
        demos = demos[:, None]
    return TaskVectorSet(
        vectors=vecs, layer_names=names,
        types=torch.as_tensor(meta["type"]).long().numpy(),
        query_subject=torch.as_tensor(meta["query_subject"]).long().numpy(),
        demo_subjects=demos, answer=torch.as_tensor(meta["answer"]).long().numpy(),
        pred=pred, tokens=b.tokens.cpu().numpy(), K=int(K if K is not None else demos.shape[1]),
        checkpoint=checkpoint, meta={"grammar": grammar, "seed": seed},
        query_pos=qp.numpy())


def iter_checkpoint_task_vectors(run, selection: str, n: int, K: int | None = None,
                                 subjects: str | Sequence[int] = "heldout", seed: int = 0,
                                 grammar: bool = False) -> Iterator[tuple[Any, TaskVectorSet]]:
    """(checkpoint, TaskVectorSet) for every checkpoint of ``run`` in ``selection``.

    ``subjects``: ``heldout``, ``finetune``, ``all`` or explicit subject indices. The same
    prompts (same seed) are used at every checkpoint.
    """
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir

    run = run if isinstance(run, RunDir) else RunDir(run)
    _, task, build = load_run_model(run)
    subj = resolve_subjects(task, subjects)
    for ck, model in run.iter_models(selection, build):
        yield ck, icl_task_vectors(model, task, n, K=K, subjects=subj, seed=seed,
                                   grammar=grammar, checkpoint=ck.name)


def output_type_accuracy(task, pred, types) -> float:
    """Share of prompts whose model answer (``pred``, token ids) is an attribute of the
    prompt's type ``types`` (``task.has_type``: in the shared-token variant a token of two
    types is right for both; the type read from the model's own output, printed beside the
    CR-4 probe: a probe that only matches this reads the prediction, not an earlier code)."""
    pred, types = np.asarray(pred), np.asarray(types)
    if not len(pred):
        return float("nan")
    return float(np.asarray(task.has_type(pred, types)).mean())


def resolve_subjects(task, subjects):
    if isinstance(subjects, str):
        check_choice("subjects", subjects, ["heldout", "finetune", "all"])
        if subjects == "heldout":
            return np.asarray(task.heldout_subjects)
        if subjects == "finetune":
            return np.asarray(task.finetune_subjects)
        return None
    return None if subjects is None else np.asarray(subjects)


# --------------------------------------------------------------------------------------------
# Geometry
# --------------------------------------------------------------------------------------------
def _as2d(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    check(X.ndim == 2 and X.shape[0] >= 2, "X", X.shape, "an (n >= 2, d) array")
    return X


def pca(X, k: int | None = None):
    """A fitted ``sklearn.decomposition.PCA`` of the rows of X with ``k`` components (default
    all), full SVD solver: deterministic, the largest |loading| of each component positive.
    Use ``components_`` (k, d), ``explained_variance_ratio_`` and ``transform``."""
    from sklearn.decomposition import PCA

    X = _as2d(X)
    k = min(X.shape) if k is None else int(k)
    check_range("k", k, 1, min(X.shape), integer=True)
    return PCA(n_components=k, svd_solver="full").fit(X)


def participation_ratio(X) -> float:
    """(sum lambda)^2 / sum lambda^2 over the covariance eigenvalues: effective dimension."""
    X = _as2d(X)
    s = np.linalg.svd(X - X.mean(0), compute_uv=False)
    lam = s ** 2
    denom = float((lam ** 2).sum())
    return float(lam.sum() ** 2 / denom) if denom > 0 else 0.0


def n_components_for(X, fraction: float = 0.9) -> int:
    """Smallest number of principal components explaining at least ``fraction`` of variance."""
    check_range("fraction", fraction, 0, 1, lo_open=True)
    X = _as2d(X)
    s = np.linalg.svd(X - X.mean(0), compute_uv=False)
    lam = s ** 2
    if lam.sum() <= 0:
        return 0
    cum = np.cumsum(lam) / lam.sum()
    return int(np.searchsorted(cum, fraction - 1e-12) + 1)


def class_means(X, labels) -> tuple[np.ndarray, np.ndarray]:
    """(classes, means (n_classes, d))."""
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels)
    classes = np.unique(labels)
    return classes, np.stack([X[labels == c].mean(0) for c in classes])


def type_variance_fraction(X, labels) -> float:
    """Share of the total variance explained by the class means (eta squared), in [0, 1].
    Any integer labels: the attribute type (CR-4's separation) or, e.g., the query subject
    (how much of the variance at a hook is the query token's own identity)."""
    X = _as2d(X)
    labels = np.asarray(labels)
    mu = X.mean(0)
    total = float(((X - mu) ** 2).sum())
    if total <= 0:
        return 0.0
    between = 0.0
    for c in np.unique(labels):
        m = labels == c
        between += m.sum() * float(((X[m].mean(0) - mu) ** 2).sum())
    return between / total


def _residual_ss(X: np.ndarray, *codes: np.ndarray) -> float:
    """Residual sum of squares of X regressed on the one-hot codes of ``codes`` (with an
    intercept; least squares)."""
    cols = [np.ones((X.shape[0], 1))]
    for c in codes:
        _, inv = np.unique(np.asarray(c), return_inverse=True)
        cols.append(np.eye(inv.max() + 1)[inv][:, 1:])  # drop one level (intercept)
    D = np.concatenate(cols, 1)
    beta, *_ = np.linalg.lstsq(D, X, rcond=None)
    return float(((X - D @ beta) ** 2).sum())


def partial_type_variance_fraction(X, types, subjects) -> float:
    """Partial eta^2 of ``types`` given ``subjects``: SS_type / (SS_type + SS_residual) in the
    additive model X ~ type + subject, with SS_type = RSS(subject only) - RSS(type + subject)
    (the type's share once the subject's own variance is removed; SPEC CR-8). In [0, 1]; 0
    when nothing is left to explain."""
    X = _as2d(X)
    rss_sub = _residual_ss(X, subjects)
    rss_full = _residual_ss(X, types, subjects)
    ss_type = max(0.0, rss_sub - rss_full)
    denom = ss_type + rss_full
    return float(ss_type / denom) if denom > 0 else 0.0


def type_subspace(X, labels) -> tuple[np.ndarray, np.ndarray]:
    """(U, mean): an orthonormal basis U (d, k) of the span of the class-mean differences
    (mean[c] - mean[c0] for every class c; k = number of classes - 1 at most, fewer when the
    differences are linearly dependent) and the overall mean of X (the training mean a
    mean-replacement writes). Fit it on training prompts only."""
    X = np.asarray(X, dtype=np.float64)
    _, means = class_means(X, labels)
    D = (means[1:] - means[:1]).T  # (d, n_classes - 1)
    check(D.shape[1] >= 1, "labels", "one class", "at least two classes")
    Q, R = np.linalg.qr(D)
    keep = np.abs(np.diag(R)) > 1e-9 * max(1.0, float(np.abs(R).max()))
    return Q[:, keep], X.mean(0)


def random_subspace(d: int, k: int, seed: int, cov: np.ndarray | None = None,
                    exclude: np.ndarray | None = None) -> np.ndarray:
    """An orthonormal basis (d, k) of a random k-dimensional subspace of R^d (QR of a Gaussian
    matrix; a pure function of ``seed``). ``cov`` (d, d): the Gaussian's covariance (directions
    drawn as the data varies, so the subspace carries a comparable share of the variance);
    ``exclude`` (d, m) orthonormal: the draw is projected onto its orthogonal complement first
    (a random subspace outside a given one)."""
    check_range("k", k, 1, d, integer=True)
    g = np.random.default_rng([int(seed), 0x5B5]).standard_normal((d, k))
    P = np.eye(d)
    if exclude is not None and np.asarray(exclude).size:
        E = np.asarray(exclude, dtype=np.float64)
        P = P - E @ E.T
    if cov is not None:
        C = P @ np.asarray(cov, dtype=np.float64) @ P
        w, V = np.linalg.eigh((C + C.T) / 2)
        g = (V * np.sqrt(np.clip(w, 0, None))) @ V.T @ g
    else:
        g = P @ g
    Q, _ = np.linalg.qr(g)
    return Q


@torch.no_grad()
def subspace_mean_replace_predictions(model, tokens: torch.Tensor, query_pos, hook_name: str,
                                      U: np.ndarray, mean: np.ndarray,
                                      batch_size: int = 512) -> np.ndarray:
    """The model's argmax answers with the query-position activation at ``hook_name``
    replaced in the subspace spanned by the orthonormal columns of ``U`` by the component of
    ``mean``: x -> x - U U^T (x - mean). Returns (N,) token ids."""
    dev = next(model.parameters()).device
    U_t = torch.as_tensor(np.asarray(U), dtype=torch.float32, device=dev)
    mu_t = torch.as_tensor(np.asarray(mean), dtype=torch.float32, device=dev)
    preds = []
    for i in range(0, tokens.shape[0], batch_size):
        tok = tokens[i:i + batch_size].to(dev)
        qp = torch.as_tensor(np.asarray(query_pos[i:i + batch_size])).long().to(dev)
        rows = torch.arange(tok.shape[0], device=dev)

        def hook(resid, hook, rows=rows, qp=qp):  # (b, T, d_model)
            resid = resid.clone()
            x = resid[rows, qp]
            resid[rows, qp] = x - ((x - mu_t) @ U_t) @ U_t.T
            return resid

        logits = model.run_with_hooks(tok, fwd_hooks=[(hook_name, hook)])
        preds.append(logits[rows, qp].argmax(-1).cpu().numpy())
    return np.concatenate(preds) if preds else np.zeros(0, dtype=np.int64)


def cosine_within_between(X, labels, center: bool = True, max_n: int = 2000,
                          seed: int = 0) -> dict[str, float]:
    """Mean pairwise cosine similarity within a type and between types (pairs i != j).

    With ``center`` the global mean is removed first (otherwise a shared offset makes every
    pair similar). Above ``max_n`` rows a fixed random subset is used.
    """
    X = _as2d(X)
    labels = np.asarray(labels)
    if X.shape[0] > max_n:
        idx = np.sort(np.random.default_rng(seed).choice(X.shape[0], max_n, replace=False))
        X, labels = X[idx], labels[idx]
    if center:
        X = X - X.mean(0)
    nrm = np.linalg.norm(X, axis=1, keepdims=True)
    U = X / np.where(nrm > 0, nrm, 1.0)
    S = U @ U.T
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(len(labels), dtype=bool)
    w = S[same & off]
    b = S[~same]
    within = float(w.mean()) if w.size else float("nan")
    between = float(b.mean()) if b.size else float("nan")
    return {"cos_within": within, "cos_between": between, "cos_gap": within - between}


def silhouette(X, labels, max_n: int = 2000, seed: int = 0) -> float:
    """Euclidean silhouette score (sklearn) on at most ``max_n`` rows; nan for < 2 classes."""
    from sklearn.metrics import silhouette_score

    X = _as2d(X)
    labels = np.asarray(labels)
    if len(np.unique(labels)) < 2:
        return float("nan")
    if X.shape[0] > max_n:
        idx = np.sort(np.random.default_rng(seed).choice(X.shape[0], max_n, replace=False))
        X, labels = X[idx], labels[idx]
    return float(silhouette_score(X, labels))


def geometry(X, labels, n_pc: int = 3) -> dict[str, float]:
    """All separation / dimension numbers of one (N, d) set of task vectors."""
    X = _as2d(X)
    p = pca(X, min(n_pc, min(X.shape)))
    Z = p.transform(X)
    return {
        "type_variance_fraction": type_variance_fraction(X, labels),
        "type_variance_fraction_pc": type_variance_fraction(Z, labels),
        "silhouette": silhouette(X, labels),
        "silhouette_pc": silhouette(Z, labels),
        **cosine_within_between(X, labels),
        "participation_ratio": participation_ratio(X),
        "n_components_90": n_components_for(X, 0.9),
        "top_pc_variance": float(p.explained_variance_ratio_.sum()),
    }


def umap_embed(X, n_components: int = 2, seed: int = 0, **kwargs) -> np.ndarray:
    """Optional UMAP view (slow first call: numba compilation). Not used on the quick path."""
    try:
        import umap  # noqa: WPS433
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ConfigError("umap = 'requested' is not allowed here; expected umap-learn to be "
                          f"installed ({e}); use PCA (the default)") from None
    reducer = umap.UMAP(n_components=n_components, random_state=seed, **kwargs)
    return np.asarray(reducer.fit_transform(np.asarray(X, dtype=np.float32)))


# --------------------------------------------------------------------------------------------
# Causal check: transplant a mean task vector
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def transplant_accuracy(model, tokens: torch.Tensor, query_pos: torch.Tensor,
                        source_types: np.ndarray, target_types: np.ndarray,
                        target_answers: np.ndarray, means: np.ndarray, hook_name: str,
                        mode: str = "add", scale: float = 1.0, original_answers=None,
                        batch_size: int = 512, random_seed: int = 0) -> dict[str, float]:
    """Patch the query-position residual at ``hook_name`` towards type ``target_types``.

    ``means`` is (n_types, d_model), the mean task vector per type at ``hook_name``.
    ``mode='add'`` adds ``scale * (means[t'] - means[t])`` (t = the prompt's own type),
    ``mode='replace'`` writes ``means[t']``, ``mode='random'`` (the control) adds a random
    vector with the norm of ``means[t'] - means[t]`` (a pure function of ``random_seed``).
    Returns the fraction of prompts whose answer
    becomes ``target_answers`` (the query subject's attribute of type t') and, when
    ``original_answers`` is given, the fraction that keep their original answer.
    """
    check_choice("mode", mode, ["add", "replace", "random"])
    dev = next(model.parameters()).device
    means_t = torch.as_tensor(np.asarray(means), dtype=torch.float32, device=dev)
    if mode == "random":  # a random direction with the norm of the mean difference, per row
        d = np.asarray(means[np.asarray(target_types)] - means[np.asarray(source_types)])
        g = np.random.default_rng([int(random_seed), 0xAD0]).standard_normal(d.shape)
        g *= np.linalg.norm(d, axis=1, keepdims=True) / np.linalg.norm(g, axis=1, keepdims=True)
        rand_t = torch.as_tensor(g, dtype=torch.float32, device=dev)
    hits, keeps, n = 0, 0, 0
    for i in range(0, tokens.shape[0], batch_size):
        tok = tokens[i:i + batch_size].to(dev)
        qp = torch.as_tensor(query_pos[i:i + batch_size]).long().to(dev)
        src = torch.as_tensor(source_types[i:i + batch_size]).long().to(dev)
        tgt = torch.as_tensor(target_types[i:i + batch_size]).long().to(dev)
        rows = torch.arange(tok.shape[0], device=dev)

        def hook(resid, hook, rows=rows, qp=qp, src=src, tgt=tgt, i=i):  # (b, T, d_model)
            resid = resid.clone()
            if mode == "add":
                resid[rows, qp] += scale * (means_t[tgt] - means_t[src])
            elif mode == "random":
                resid[rows, qp] += scale * rand_t[i + rows]
            else:
                resid[rows, qp] = means_t[tgt]
            return resid

        logits = model.run_with_hooks(tok, fwd_hooks=[(hook_name, hook)])
        pred = logits[rows, qp].argmax(-1).cpu().numpy()
        hits += int((pred == np.asarray(target_answers[i:i + batch_size])).sum())
        if original_answers is not None:
            keeps += int((pred == np.asarray(original_answers[i:i + batch_size])).sum())
        n += tok.shape[0]
    out = {"transplant_success": hits / max(1, n), "n": n}
    if original_answers is not None:
        out["kept_original"] = keeps / max(1, n)
    return out
