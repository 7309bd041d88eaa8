#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Self-checks of the DSpark reference on the committed tiny-dspark fixture.

  drafter    the drafter's structure: Markov sequencing and confidence inputs, the context
             window (only the last min(W, P) committed rows matter), bidirectional block,
             incremental ring == ring built at once
  verify     speculative greedy decoding == plain greedy for the drafter itself, for oracle
             proposers right up to slot j then wrong (j = 0..gamma), and every verify length
  goldens    the reference matches dspark_goldens.json and every drafter mutation breaks it

Usage: test_dspark_ref.py FIXTURE_DIR {drafter,verify,goldens}
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pinned  # noqa: E402

pinned.pin()

import numpy as np  # noqa: E402

import dspark_goldens  # noqa: E402
import dspark_ref  # noqa: E402
import dsv4ref  # noqa: E402

FAILS = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILS.append(what)


def load(fixture):
    ck = dsv4ref.safetensors_io.load_checkpoint(fixture)
    m = dsv4ref.Model(fixture, checkpoint=ck)
    return m, dspark_ref.Drafter(m, fixture, checkpoint=ck)


def prompt(n, seed=7):
    g = np.random.default_rng(seed)
    return [0] + [int(t) for t in g.integers(2, 250, n - 1)]


def drafter_checks(m, dr):
    W, gamma = m.cfg.win, dr.dc.block
    seq = prompt(W + 12)
    _, hidden = dr.target_forward(m.new_state(), seq, 0)
    P = len(seq) - 1
    anchor = seq[P]

    # incremental commits (1, 3, rest) == one commit
    a, b = dr.new_state(), dr.new_state()
    dr.commit(a, hidden[:P], 0)
    for lo, hi in ((0, 1), (1, 4), (4, P)):
        dr.commit(b, hidden[lo:hi], lo)
    check(all(np.array_equal(x, y) for x, y in zip(a.ring, b.ring)),
          "ring: incremental commits == one commit")
    out = dr.draft(a, anchor)

    # Markov sequencing and confidence inputs (spec §6): prev_1 = anchor, prev_i = d_{i-1}
    prevs = [anchor] + out['drafts'][:-1]
    ok_bias = ok_conf = True
    for i, p in enumerate(prevs):
        e, bias = dr.markov(p)
        ok_bias &= np.array_equal(out['logits'][i], (out['base_logits'][i] + bias).astype(np.float32))
        want = np.dot(np.concatenate([out['hidden'][i], e]).astype(np.float64),
                      dr.conf_T[:, 0])
        ok_conf &= abs(float(out['confidence_logit'][i]) - want) <= 1e-5 * max(1.0, abs(want))
    check(ok_bias, "Markov: z_i = U_i + B(prev_i), prev_1 = anchor, prev_i = d_(i-1)")
    check(ok_conf, "confidence: w . [pre-norm h_i ; W1[prev_i]], no bias")
    check(all(d == int(np.argmax(z)) for d, z in zip(out['drafts'], out['logits'])),
          "drafts are the argmax of the corrected logits")

    # context window: rows older than P - W do not matter, the newest row does
    c = dr.new_state()
    noisy = hidden[:P].copy()
    noisy[:P - W] += np.float32(3.0)
    dr.commit(c, dsv4ref.bf16(noisy), 0)
    check(np.array_equal(dr.draft(c, anchor)['logits'], out['logits']),
          f"window: rows before P - W ({P - W}) are invisible")
    d = dr.new_state()
    noisy = hidden[:P].copy()
    noisy[P - 1] += np.float32(3.0)
    dr.commit(d, dsv4ref.bf16(noisy), 0)
    check(not np.array_equal(dr.draft(d, anchor)['logits'], out['logits']),
          "window: the newest committed row (P - 1) is visible")

    # bidirectional block: slot 0 depends on the noise slots after it
    other = dspark_ref.Drafter.__new__(dspark_ref.Drafter)
    other.__dict__.update(dr.__dict__)
    other.dc = type(dr.dc).__new__(type(dr.dc))
    other.dc.__dict__.update(dr.dc.__dict__, noise=(dr.dc.noise + 1) % m.cfg.vocab)
    h2, U2 = other.backbone(a, anchor)
    check(not np.array_equal(U2[0], out['base_logits'][0]),
          "block: slot 0 sees the later (noise) slots")
    check(len(out['drafts']) == gamma, f"block of gamma = {gamma} proposals")

    # short context (P = 1): one ring row
    e = dr.new_state()
    dr.commit(e, hidden[:1], 0)
    o1 = dr.draft(e, seq[1])
    check(np.all(np.isfinite(o1['logits'])), "P = 1: drafting with one context row")


def verify_checks(m, dr):
    p = prompt(7, seed=3)
    n = 30
    ref = dspark_ref.greedy_reference(m, p, n)
    got, log = dspark_ref.speculate_greedy(dr, p, n)
    acc = sum(c['accepted'] for c in log)
    check(got == ref, f"drafter: speculative == greedy ({len(log)} cycles, {acc} accepted)")
    gamma = dr.dc.block
    seen = set()
    for j in range(gamma + 1):
        def oracle(P, anchor, drafts, j=j):
            i = P - len(p)          # ref[i] is the anchor at position P
            want = ref[i + 1:i + 1 + gamma] + [0] * gamma
            want = want[:gamma]
            if j < gamma:
                want[j] = (want[j] + 1) % m.cfg.vocab
            return want
        got, log = dspark_ref.speculate_greedy(dr, p, n, propose=oracle)
        seen |= {c['accepted'] for c in log}
        check(got == ref, f"oracle right up to slot {j}: speculative == greedy "
              f"(accepted {[c['accepted'] for c in log]})")
    check(seen >= set(range(gamma + 1)), f"every acceptance 0..{gamma} exercised: {sorted(seen)}")
    for L in range(gamma + 1):
        got, _ = dspark_ref.speculate_greedy(dr, p, 12, verify_len=lambda d, L=L: L)
        check(got == ref[:12], f"verify length {L}: speculative == greedy")


def golden_checks(fixture, dr):
    with open(os.path.join(fixture, "dspark_goldens.json")) as f:
        gold = json.load(f)
    why = dspark_goldens.evaluate(dr, gold)
    check(not why, f"reference within the drafter goldens {why}")
    for name in dspark_ref.MUTATIONS:
        why = dspark_goldens.evaluate(dr.with_mutation(name), gold)
        check(bool(why), f"mutation {name} detected ({len(why)} bounds: {why[:3]})")
    for name in ('no_q_headnorm', 'no_sink', 'comb_untransposed'):
        mv = dr.with_model(dr.m.with_variant(dsv4ref.Variant(mutation=name)))
        why = dspark_goldens.evaluate(mv, gold)
        check(bool(why), f"shared mutation {name} detected ({len(why)} bounds)")


def main():
    fixture, what = sys.argv[1], sys.argv[2]
    m, dr = load(fixture)
    {'drafter': lambda: drafter_checks(m, dr), 'verify': lambda: verify_checks(m, dr),
     'goldens': lambda: golden_checks(fixture, dr)}[what]()
    print(f"{len(FAILS)} failures")
    return 1 if FAILS else 0


if __name__ == '__main__':
    sys.exit(main())
