# SPDX-License-Identifier: MIT
"""Golden drafter outputs of a DSpark fixture: tests/fixtures/<name>/dspark_goldens.json.

For each context (a golden prompt followed by the target's greedy continuation) the drafter's
ring is filled with the committed rows < P and one block is drafted with the anchor seq[P], at
the positions P of SCHEDULE (short contexts, single-row and multi-row commits, a ring that has
wrapped). Recorded per block: drafts, Markov-corrected logits z (all of them for a context's
first block, the TOP_K largest per slot after that), confidence logits
and probabilities, per-slot margin and stability, and tolerances derived like the target's
(tools/reference/goldens.py): FACTOR x the largest deviation of the fp32 summation-order members
of the ensemble, every member run along the official member's Markov chain. Format and
rationale: docs/numerics.md "DSpark numerics".
"""
import numpy as np

import dspark_ref
import goldens

FORMAT = 1
# prompt length -> drafting positions P (anchor = seq[P]); sliding_window 32 in the fixture.
SCHEDULE = {1: (1, 2, 6), 7: (7, 8, 12, 33), 70: (70, 71, 75)}
N_GREEDY = 32
# Tolerance floors (the order members often agree exactly on short contexts): logits as the
# target goldens' last_logits_max floor; confidence logits 0.01.
FLOOR = {"logits": 0.05, "confidence_logit": 0.01}
TOP_K = 16   # logits kept per slot after a context's first block (whose logits are all kept)


def _tap_rows(dr, seq):
    st = dr.m.new_state()
    _, hidden = dr.target_forward(st, seq, 0)
    return hidden


def _blocks(dr, seq, hidden, schedule, chains=None):
    ds = dr.new_state()
    out = []
    for i, P in enumerate(schedule):
        dr.commit(ds, hidden[ds.n:P], ds.n)
        out.append(dr.draft(ds, seq[P], None if chains is None else chains[i]))
    return out


def _top2_margin(z):
    s = np.sort(z.astype(np.float64), axis=-1)
    return s[:, -1] - s[:, -2]


def _top(z):
    """The TOP_K largest corrected logits of a slot as [[id, logit], ...] (descending, lower
    id first on ties): later blocks store only these to keep the fixture small."""
    order = np.argsort(-z, kind='stable')[:TOP_K]
    return [[int(i), round(float(z[i]), 4)] for i in order]


def make(drafters, prompt_list, meta):
    """drafters: [(name, Drafter, role)] with the official member first (goldens.ensemble)."""
    base = drafters[0][1]
    entries = []
    for p in prompt_list:
        if len(p) not in SCHEDULE:
            continue
        sched = SCHEDULE[len(p)]
        seq = p + dspark_ref.greedy_reference(base.m, p, N_GREEDY)
        need = max(sched) + 1
        seq = seq[:need]
        ref = _blocks(base, seq, _tap_rows(base, seq), sched)
        chains = [b['drafts'] for b in ref]
        dev = [dict(logits=0.0, confidence_logit=0.0, margin=np.zeros(0))
               for _ in sched]
        stable = [np.ones(len(b['drafts']), bool) for b in ref]
        for name, dv, role in drafters[1:]:
            got = _blocks(dv, seq, _tap_rows(dv, seq), sched, chains)
            for j, (g, b) in enumerate(zip(got, ref)):
                stable[j] &= np.asarray(g['drafts']) == np.asarray(b['drafts'])
                if role != 'order':
                    continue
                d = dev[j]
                for k in FLOOR:
                    d[k] = max(d[k], float(np.max(np.abs(g[k] - b[k]))))
                d['margin'] = np.concatenate([d['margin'], np.abs(
                    _top2_margin(g['logits']) - _top2_margin(b['logits']))])
        blocks = []
        for j, (P, b) in enumerate(zip(sched, ref)):
            mg = _top2_margin(b['logits'])
            clear = goldens.CLEAR_FACTOR * float(np.max(dev[j]['margin']))
            blocks.append({
                "P": P, "anchor": int(seq[P]), "drafts": b['drafts'],
                ("logits" if j == 0 else "logits_top"):
                    [goldens.r(row, 4) for row in b['logits']] if j == 0 else
                    [_top(row) for row in b['logits']],
                "confidence_logit": goldens.r(b['confidence_logit'], 6),
                "confidence": goldens.r(b['confidence'], 6),
                "margin": goldens.r(mg, 4),
                "stable": [int(x) for x in stable[j] & (mg > clear)],
                "tolerances": {k: round(max(goldens.FACTOR * dev[j][k], FLOOR[k]), 6)
                               for k in FLOOR}})
        entries.append({"prompt_len": len(p), "tokens": seq, "blocks": blocks})
    return dict(meta, format=FORMAT, factor=goldens.FACTOR, clear_factor=goldens.CLEAR_FACTOR,
                ensemble=[d[0] for d in drafters], contexts=entries)


def evaluate(dr, gold):
    """Deviations of a candidate drafter from the goldens, per block, along the golden chain;
    returns the list of bounds it breaks ('P<P>:<what>'; empty = within tolerance)."""
    why = []
    for e in gold["contexts"]:
        seq = e["tokens"]
        sched = [b["P"] for b in e["blocks"]]
        got = _blocks(dr, seq, _tap_rows(dr, seq), sched, [b["drafts"] for b in e["blocks"]])
        for g, b in zip(got, e["blocks"]):
            tag = f"len{e['prompt_len']}/P{b['P']}"
            if "logits" in b:
                dz = np.abs(g['logits'] - np.asarray(b['logits'], dtype=np.float32))
            else:
                ids = np.asarray([[i for i, _ in row] for row in b['logits_top']])
                want = np.asarray([[v for _, v in row] for row in b['logits_top']], np.float32)
                dz = np.abs(np.take_along_axis(g['logits'], ids, axis=1) - want)
            if np.max(dz) > b["tolerances"]["logits"]:
                why.append(f"{tag}:logits")
            dc = np.abs(g['confidence_logit'] - np.asarray(b['confidence_logit'], np.float32))
            if np.max(dc) > b["tolerances"]["confidence_logit"]:
                why.append(f"{tag}:confidence_logit")
            st = np.asarray(b["stable"], bool)
            if np.any(st & (np.asarray(g['drafts']) != np.asarray(b['drafts']))):
                why.append(f"{tag}:drafts")
    return why
