# SPDX-License-Identifier: MIT
"""The reference target's main_hidden rows (dspark spec §4) for every context of a fixture's
dspark_goldens.json, as raw little-endian float32 [rows][taps*dim], contexts in file order.

tests/unit/test-dspark.c feeds them to the C drafter so that its comparison with the drafter
goldens measures the drafter alone: the C target's own taps may differ from the reference's
by a few bf16 ulps that the tiny random model amplifies (docs/numerics.md "DSpark numerics").

    dspark_taps.py FIXTURE_DIR OUT_FILE
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dspark_ref  # noqa: E402
import dsv4ref  # noqa: E402


def main():
    fixture, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(fixture, 'dspark_goldens.json')) as fh:
        gold = json.load(fh)
    m = dsv4ref.Model(fixture)
    dr = dspark_ref.Drafter(m, fixture)
    rows = []
    for ctx in gold['contexts']:
        _, hidden = dr.target_forward(m.new_state(), ctx['tokens'], 0)
        rows.append(np.asarray(hidden, dtype='<f4'))
    tmp = out + '.tmp'
    np.concatenate(rows).tofile(tmp)
    os.replace(tmp, out)


if __name__ == '__main__':
    main()
