# SPDX-License-Identifier: MIT
"""The reference target's hidden state after every layer (the mHC streams averaged over the hc
copies, bf16: the same reduction as the DSpark taps) for every prompt of a fixture's
goldens.json, as raw little-endian float32 [rows][n_layers][dim], prompts in file order.

tests/unit/test-layers.c compares the C engine's rows with these bit for bit, layer by layer,
to catch a numeric defect where it starts instead of where the logits show it
(docs/numerics.md "Per-layer agreement").

    layer_hidden.py FIXTURE_DIR OUT_FILE
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsv4ref  # noqa: E402


def main():
    fixture, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(fixture, 'goldens.json')) as fh:
        gold = json.load(fh)
    m = dsv4ref.Model(fixture)
    rows = []
    for p in gold['prompts']:
        m.trace = {}
        m.forward(m.new_state(), p['tokens'], 0)
        per_layer = [dsv4ref.bf16(dsv4ref.fmean(m.trace[f'L{L}.streams'][-1], axis=1))
                     for L in range(len(m.layers))]
        rows.append(np.stack(per_layer, axis=1).astype('<f4'))        # [n, L, dim]
    m.trace = None
    tmp = out + '.tmp'
    np.concatenate(rows).tofile(tmp)
    os.replace(tmp, out)


if __name__ == '__main__':
    main()
