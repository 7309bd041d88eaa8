# SPDX-License-Identifier: MIT
"""tools/make_tiny_model.py: same seed -> byte-identical files, the committed fixture
checkpoints are exactly what the generator writes from their recorded seeds, and the
checkpoints follow the official layout with the properties the fixtures rely on.
Usage: test_make_tiny_model.py BUILD_DIR"""
import filecmp
import json
import os
import shutil
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import formats  # noqa: E402
import layout  # noqa: E402
import make_fixtures  # noqa: E402  (pins numerics: re-executes this test once)
import make_tiny_model as mt  # noqa: E402
import safetensors_io  # noqa: E402

fails = 0


def check(what, ok):
    global fails
    print(f"{'ok' if ok else 'FAIL'}: {what}")
    fails += not ok


def same_files(a, b):
    fa, fb = sorted(os.listdir(a)), sorted(os.listdir(b))
    return fa == fb and all(filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False)
                            for f in fa)


def main(scratch):
    cfg, init = mt.PRESETS["tiny"]
    a, b, c = (os.path.join(scratch, n) for n in ("a", "b", "c"))
    mt.write_model(a, cfg, init, 5)
    mt.write_model(b, cfg, init, 5)
    mt.write_model(c, cfg, init, 6)
    check("same seed: byte-identical checkpoint", same_files(a, b))
    check("other seed: different bytes", not same_files(a, c))
    for name, (preset, seed, _, _) in make_fixtures.FIXTURES.items():
        d = os.path.join(scratch, "regen", name)
        cfg, init = mt.PRESETS[preset]
        mt.write_model(d, cfg, init, seed)
        committed = os.path.join(ROOT, "tests", "fixtures", name)
        ok = all(filecmp.cmp(os.path.join(d, f), os.path.join(committed, f), shallow=False)
                 for f in os.listdir(d) if os.path.isfile(os.path.join(d, f)))
        check(f"{name}: regenerated checkpoint == committed", ok)
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(committed)
                   for f in fs)
        check(f"{name}: {size} bytes <= 4 MB", size <= 4_000_000)
        ck = safetensors_io.load_checkpoint(committed)
        with open(os.path.join(committed, "config.json")) as f:
            ccfg = json.load(f)
        want = layout.tensors(ccfg)
        check(f"{name}: official tensor list, dtypes and shapes",
              sorted(ck) == sorted(n for n, _, _ in want) and
              all(ck.dtypes[n] == dt and ck[n].shape == tuple(s) for n, dt, s in want))
        check(f"{name}: >= 2 HF shards", len(set(ck.shard.values())) >= 2)
        check(f"{name}: quantization_config", ccfg["quantization_config"]["weight_block_size"]
              == [128, 128])
        tid = [ck[n] for n in ck if n.endswith("gate.tid2eid")]
        check(f"{name}: tid2eid rows are distinct experts",
              bool(tid) and all(len(set(r)) == len(r) for t in tid for r in t.tolist()))
        # gate.bias spread larger than the spread of router scores sqrt(softplus(.)) of
        # unit-RMS inputs, so biased selection differs from the unbiased top-k
        bias = [ck[n] for n in ck if n.endswith("gate.bias")]
        check(f"{name}: gate.bias spread >= 1", all(np.ptp(x) >= 1.0 for x in bias))
        e4m3 = [formats.e4m3_decode(ck[n]) for n in ck if ck.dtypes[n] == "F8_E4M3"]
        check(f"{name}: E4M3 codes finite, blocks use the range",
              all(np.isfinite(x).all() for x in e4m3) and
              all(np.abs(x).max() >= 224 for x in e4m3))
    return 1 if fails else 0


if __name__ == "__main__":
    d = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "/tmp", "make_tiny_model")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    sys.exit(main(d))
