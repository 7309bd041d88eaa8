# SPDX-License-Identifier: MIT
"""Golden outputs of the reference: ensemble runs, stability, tolerances, verdicts.

Owns the statistics behind tests/fixtures/*/goldens.json (format and rationale:
docs/numerics.md, "Goldens"). verdict() judges a candidate's logits against the goldens by the
same rules an engine test uses: it fails if it changes the argmax of a stable position, or if
its |delta log p| statistics or its last-position logits leave the ensemble-derived bounds.
The mutation test runs each dsv4ref mutation through it.
"""
import numpy as np

import dsv4ref

FORMAT = 1
# Prompt lengths: 1 and 7 (short: full last-position logits), 70 (crosses the 64-token chunk
# boundary, wraps the window twice), 200 and 520 (compressed rows in every compressed layer;
# the CSA indexer selects index_topk of 50 resp. 130 rows).
PROMPT_LENGTHS = (1, 7, 70, 200, 520)
FULL_LOGITS_MAX_LEN = 7
CHUNK = 64           # prefill chunk of every run (an engine's natural batch)
FACTOR = 2.0         # bounds = FACTOR x the largest order-member statistic of the prompt
CLEAR_FACTOR = 1.5   # margin clear: > CLEAR_FACTOR x p99 of the order members' perturbation
                     # of the margin on the prompt (see make())


def ensemble():
    """(name, Variant, role): the official numerics first. 'order' members (fp32 summation-
    order jitter: what separates two correct implementations of the same numerics) define the
    tolerances; 'source' members (choices where the official sources disagree) only widen the
    stability test. docs/numerics.md says why each is legitimate."""
    V = dsv4ref.Variant
    return [("official", V(), "base"),
            ("sum_seed=1", V(sum_seed=1), "order"),
            ("sum_seed=2", V(sum_seed=2), "order"),
            ("sum_seed=3", V(sum_seed=3), "order"),
            ("sum_seed=4", V(sum_seed=4), "order"),
            ("kv_fp8=False", V(kv_fp8=False), "source"),
            ("p_bf16=False", V(p_bf16=False), "source")]


def prompts(vocab, seed):
    """Token-id prompts, deterministic from the seed; each starts with BOS (0)."""
    g = np.random.default_rng([seed, 0x90])
    return [[0] + [int(t) for t in g.integers(2, vocab, n - 1)] for n in PROMPT_LENGTHS]


def run_prefill(model, tokens, chunk=CHUNK):
    """Logits [len, V] of every position, prefilled in chunks of `chunk` tokens."""
    st = model.new_state()
    out = [model.forward(st, tokens[i:i + chunk], i) for i in range(0, len(tokens), chunk)]
    return np.concatenate(out, axis=0).astype(np.float32)


def greedy(model, prompt, n, chunk=CHUNK):
    """n greedy tokens after the prompt: chunked prefill, then one-token decode steps."""
    st = model.new_state()
    for i in range(0, len(prompt), chunk):
        last = model.forward(st, prompt[i:i + chunk], i)[-1]
    toks = []
    for k in range(n):
        toks.append(int(np.argmax(last)))
        if k + 1 < n:
            last = model.forward(st, [toks[-1]], len(prompt) + k)[-1]
    return toks


def log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def top2(logits):
    o = np.argsort(-np.asarray(logits, np.float64), axis=-1, kind="stable")
    return o[:, 0], o[:, 1]


def margin_of(logits, a):
    """logit[a] - max of the other logits, per row (negative when a is not the argmax)."""
    lg = np.asarray(logits, np.float64).copy()
    r = np.arange(lg.shape[0])
    la = lg[r, a]
    lg[r, a] = -np.inf
    return la - lg.max(axis=-1)


def next_logp(logits, seq):
    """log p(seq[t+1]) at every position t of seq[:-1]."""
    n = len(seq) - 1
    return log_softmax(logits[:n])[np.arange(n), np.asarray(seq[1:])]


def r(x, nd):
    return [round(float(v), nd) for v in x]


STAT_FLOOR = {"dlogp_median": 0.01, "dlogp_p90": 0.05, "last_logits_max": 0.05}


def dlogp_stats(dl):
    return {"dlogp_median": float(np.median(dl)), "dlogp_p90": float(np.percentile(dl, 90))}


def make(models, prompt_list, n_greedy, meta):
    """Run the ensemble and build the goldens dict. models: [(name, Model, role)], base first."""
    base_model = models[0][1]
    seqs, base = [], []
    for p in prompt_list:
        g = greedy(base_model, p, n_greedy)
        seq = p + g
        lg = run_prefill(base_model, seq[:-1])
        # decode == prefill in the reference: the greedy tokens are the prefill argmaxes
        if not np.array_equal(np.argmax(lg[len(p) - 1:], axis=-1), np.asarray(g)):
            raise AssertionError(f"prompt {len(p)}: greedy decode differs from prefill argmax")
        seqs.append(seq)
        base.append(lg)
    # per prompt: stability over every member, statistics per member
    stable = [np.ones(len(s) - 1, bool) for s in seqs]
    pstats = [[] for _ in seqs]
    members = []
    for name, model, role in models[1:]:
        mstats = []
        for i, (s, p, lb) in enumerate(zip(seqs, prompt_list, base)):
            lm = run_prefill(model, s[:-1])
            a, _ = top2(lb)
            stable[i] &= margin_of(lm, a) > 0
            st = dlogp_stats(np.abs(next_logp(lm, s) - next_logp(lb, s)))
            if len(p) <= FULL_LOGITS_MAX_LEN:
                st["last_logits_max"] = float(np.max(np.abs(lm[len(p) - 1] - lb[len(p) - 1])))
            b = top2(lb)[1]
            rr = np.arange(len(a))
            st["margin_perturbation"] = np.abs((lm[rr, a] - lm[rr, b]).astype(np.float64)
                                               - (lb[rr, a] - lb[rr, b]))
            mstats.append(st)
            if role == "order":
                pstats[i].append(st)
        members.append((name, role, mstats))
    # A margin is clear when it exceeds CLEAR_FACTOR x the p99 of the order members' margin
    # perturbation on this prompt (chaos grows with context), and never less than
    # CLEAR_FACTOR x their p90 pooled over all prompts (short prompts often show none at all).
    # Rarer larger jumps are the discrete flips the per-member argmax agreement catches.
    order = [ms for _, role, ms in members if role == "order"]
    floor = CLEAR_FACTOR * float(np.percentile(np.concatenate(
        [st["margin_perturbation"] for ms in order for st in ms]), 90))
    out_prompts = []
    for i, (s, p, lb) in enumerate(zip(seqs, prompt_list, base)):
        a, _ = top2(lb)
        mg = margin_of(lb, a)
        clear = max(floor, CLEAR_FACTOR * float(np.percentile(np.concatenate(
            [ms[i]["margin_perturbation"] for ms in order]), 99)))
        stable[i] &= mg > clear
        tol = {k: max(STAT_FLOOR[k], max(st[k] for st in pstats[i]))
               for k in STAT_FLOOR if k in pstats[i][0]}
        entry = {"prompt_len": len(p), "tokens": s,
                 "argmax": [int(x) for x in a],
                 "margin": r(mg, 4),
                 "stable": [int(x) for x in stable[i]],
                 "logp": r(next_logp(lb, s), 5),
                 "tolerances": {k: round(v, 6) for k, v in tol.items()},
                 "margin_clear": round(clear, 4),
                 "n_stable_prompt": int(stable[i][:len(p) - 1].sum()),
                 "n_stable_greedy": int(stable[i][len(p) - 1:].sum()),
                 "greedy_stable_prefix": int(np.argmin(np.append(stable[i][len(p) - 1:], False)))}
        if len(p) <= FULL_LOGITS_MAX_LEN:
            entry["last_logits"] = r(lb[len(p) - 1], 5)
        out_prompts.append(entry)
    summary = [{"name": n, "role": role,
                "dlogp_median": [round(st["dlogp_median"], 6) for st in ms],
                "dlogp_p90": [round(st["dlogp_p90"], 6) for st in ms],
                "margin_perturbation_p99": round(float(np.percentile(np.concatenate(
                    [st["margin_perturbation"] for st in ms]), 99)), 6)}
               for n, role, ms in members]
    return dict(meta, format=FORMAT, chunk=CHUNK, n_greedy=n_greedy, factor=FACTOR,
                clear_factor=CLEAR_FACTOR,
                ensemble=[m[0] for m in models], members=summary, prompts=out_prompts)


def evaluate(model, gold):
    """Per-prompt statistics of a candidate model against the goldens (teacher-forced)."""
    res = []
    for e in gold["prompts"]:
        s = e["tokens"]
        lg = run_prefill(model, s[:-1], gold["chunk"])
        st = np.asarray(e["stable"], bool)
        bad = st & (np.argmax(lg, axis=-1) != np.asarray(e["argmax"]))
        d = dlogp_stats(np.abs(next_logp(lg, s) - np.asarray(e["logp"])))
        d.update(stable_flips=int(bad.sum()), n_stable=int(st.sum()))
        if "last_logits" in e:
            k = e["prompt_len"] - 1
            d["last_logits_max"] = float(np.max(np.abs(lg[k] - np.asarray(e["last_logits"]))))
        res.append(d)
    return res


def verdict(stats, gold):
    """Bounds a candidate breaks, as 'len<L>:<what>' (empty: within the ensemble's spread)."""
    f = gold["factor"]
    why = []
    for e, st in zip(gold["prompts"], stats):
        tag = f"len{e['prompt_len']}"
        if st["stable_flips"]:
            why.append(f"{tag}:flips")
        for k, v in e["tolerances"].items():
            if st[k] > f * v:
                why.append(f"{tag}:{k}")
    return why
