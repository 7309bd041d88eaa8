# SPDX-License-Identifier: MIT
"""Self-test of tools/reference/formats.py: exhaustive code tables, RNE tie cases, saturation,
scale rule and the weight dequantisers. Independent check: every expected value is derived
here from the format definitions with plain Python floats, not from formats.py itself."""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import formats as F  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def e4m3_ref(c):
    s = -1.0 if c & 0x80 else 1.0
    e, m = (c >> 3) & 15, c & 7
    if e == 15 and m == 7:
        return float('nan')
    return s * (m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


def nearest_even(x, table):
    """Brute force RNE over a finite list of (code, value): nearest, ties to the even code."""
    best = None
    for c, v in table:
        d = abs(x - v)
        if best is None or d < best[0] or (d == best[0] and c % 2 == 0 and best[1] % 2 == 1):
            best = (d, c, v)
    return best[2]


# --- E4M3: decode table, encode round trip on all 254 finite codes, NaN codes
vals = [e4m3_ref(c) for c in range(256)]
dec = F.e4m3_decode(np.arange(256, dtype=np.uint8))
for c in range(256):
    if c in (0x7F, 0xFF):
        check(np.isnan(dec[c]), f"e4m3 {c:#x} NaN")
    else:
        check(dec[c] == vals[c], f"e4m3 decode {c:#x}")
fin = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=np.uint8)
check(np.array_equal(F.e4m3_encode(dec[fin]), fin), "e4m3 encode(decode(c)) == c")
check(F.e4m3_decode(0x7E) == 448.0 and F.e4m3_decode(0x01) == 2.0 ** -9, "e4m3 extremes")
enc_nan = F.e4m3_encode(np.array([np.nan, -np.nan], dtype=np.float32))
check(enc_nan[0] == 0x7F and enc_nan[1] == 0xFF, "e4m3 NaN codes")
check(np.array_equal(F.e4m3_encode(np.array([1e6, -1e6, 449, np.inf], np.float32)),
                     np.array([0x7E, 0xFE, 0x7E, 0x7E], np.uint8)), "e4m3 saturation")
# midpoints between consecutive positive values: ties go to the even code
pos = [(c, vals[c]) for c in range(0x7F)]
for i in range(len(pos) - 1):
    mid = (pos[i][1] + pos[i + 1][1]) / 2
    got = float(F.e4m3_round(np.float32(mid)))
    want = pos[i][1] if pos[i][0] % 2 == 0 else pos[i + 1][1]
    check(got == want, f"e4m3 tie {mid}")
    check(float(F.e4m3_round(np.float32(-mid))) == -want, f"e4m3 tie -{mid}")
# random values against brute force
rng = np.random.default_rng(1)
xs = (rng.standard_normal(3000) * np.exp2(rng.integers(-12, 10, 3000))).astype(np.float32)
xs = np.clip(xs, -448, 448)
got = F.e4m3_round(xs)
tab = pos + [(c | 0x80, -v) for c, v in pos]
for x, g in zip(xs[:600], got[:600]):
    check(g == nearest_even(float(x), tab), f"e4m3 random {x}")

# --- E8M0
b = np.arange(256, dtype=np.uint8)
e8 = F.e8m0_to_f32(b)
check(np.isnan(e8[255]), "e8m0 0xFF NaN")
check(all(float(e8[i]) == 2.0 ** (i - 127) for i in range(255)), "e8m0 table")
check(e8[0].view(np.uint32) == 0x00400000, "e8m0 byte 0 = 2^-127 subnormal")
check(np.array_equal(F.e8m0_from_pow2(e8[:255]), b[:255]), "e8m0 round trip")

# --- E2M1
e2 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
d2 = F.e2m1_decode(np.arange(16, dtype=np.uint8))
check(all(d2[c] == e2[c] and d2[c + 8] == -e2[c] for c in range(8)), "e2m1 table")
check(np.signbit(d2[8]), "e2m1 code 8 = -0")
check(np.array_equal(F.e2m1_encode(d2), np.arange(16, dtype=np.uint8)), "e2m1 round trip")
ties = {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0}
for x, want in ties.items():
    check(float(F.e2m1_round(np.float32(x))) == want, f"e2m1 tie {x}")
    check(float(F.e2m1_round(np.float32(-x))) == -want, f"e2m1 tie -{x}")
check(np.array_equal(F.e2m1_round(np.array([7, 100, -9], np.float32)),
                     np.array([6, 6, -6], np.float32)), "e2m1 saturation")
tab2 = [(c, e2[c]) for c in range(8)] + [(c + 8, -e2[c]) for c in range(1, 8)]
xs2 = rng.uniform(-7, 7, 2000).astype(np.float32)
got2 = F.e2m1_round(xs2)
check(all(g == nearest_even(float(min(max(x, -6), 6)), tab2) for x, g in zip(xs2, got2)),
      "e2m1 random")

# --- BF16: exhaustive over the bf16 grid round trip, RNE ties, NaN
allb = np.arange(65536, dtype=np.uint16)
f = F.bf16_to_f32(allb)
ok = ~np.isnan(f)
check(np.array_equal(F.bf16_bits(f[ok]), allb[ok]), "bf16 exact round trip")
check(all(F.bf16_to_f32(np.array([i], np.uint16))[0] ==
          struct.unpack('<f', struct.pack('<I', i << 16))[0] for i in (0x3F80, 0xC000, 0x0001)),
      "bf16 decode")
u = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F817FFF, 0x7F7FFFFF], dtype=np.uint32)
want = np.array([0x3F80, 0x3F82, 0x3F81, 0x3F81, 0x7F80], dtype=np.uint16)
check(np.array_equal(F.bf16_bits(u.view(np.float32)), want), "bf16 ties to even / overflow")
nb = F.bf16_bits(np.array([np.nan], np.float32))
check(np.isnan(F.bf16_to_f32(nb))[0], "bf16 NaN")

# --- ceil_log2 and the scale rule
check(list(F.ceil_log2(np.array([1, 2, 3, 4, 0.5, 0.75, 448, 449], np.float32))) ==
      [0, 1, 2, 2, -1, 0, 9, 9], "ceil_log2")
check(float(F.pow2_scale(448.0, 1 / 448)) == 1.0, "scale at exact 448")

# --- fp8_qdq / fp4_qdq against a scalar reimplementation
def fp8_qdq_scalar(blk):
    amax = max(max(abs(float(v)) for v in blk), 1e-4)
    prod = float(np.float32(np.float32(amax) * np.float32(1 / np.float32(448))))
    m, e = np.frexp(prod)
    s = 2.0 ** (e - 1 if m == 0.5 else e)
    return [nearest_even(min(max(float(v) / s, -448), 448), tab) * s for v in blk]


x = (rng.standard_normal((3, 200)) * 3).astype(np.float32)
x[0, :64] = 0            # all-zero block: amax floor
got = F.fp8_qdq(x, 64)
for r in range(3):
    for k in range(0, 200, 64):
        blk = x[r, k:k + 64]
        check(np.array_equal(got[r, k:k + 64], np.array(fp8_qdq_scalar(blk), np.float32)),
              f"fp8_qdq row {r} block {k}")
check(np.array_equal(F.fp8_qdq(got, 64), got), "fp8_qdq idempotent")
q, s = F.fp8_quant(x, 128)
check(q.shape == (3, 200) and s.shape == (3, 2), "fp8_quant partial block shapes")
y4 = F.fp4_qdq(x, 32)
check(np.array_equal(F.fp4_qdq(y4, 32), y4), "fp4_qdq idempotent")
blk = x[1, :32]
amax = float(np.max(np.abs(blk)))
prod = float(np.float32(np.float32(amax) * np.float32(1 / np.float32(6))))
m, e = np.frexp(prod)
s4 = 2.0 ** (e - 1 if m == 0.5 else e)
check(np.array_equal(y4[1, :32], np.array([nearest_even(min(max(float(v) / s4, -6), 6), tab2) * s4
                                           for v in blk], np.float32)), "fp4_qdq block")
check(np.all(F.fp4_qdq(np.zeros((1, 32), np.float32)) == 0), "fp4_qdq zeros")

# --- weight dequantisers
w = rng.integers(0, 256, (130, 260)).astype(np.uint8)
w[w == 0x7F] = 0
w[w == 0xFF] = 0
sc = rng.integers(120, 130, (2, 3)).astype(np.uint8)
wf = F.dequant_fp8_weight(w, sc, 128)
check(wf[129, 259] == vals[w[129, 259]] * 2.0 ** (int(sc[1, 2]) - 127), "fp8 weight corner")
check(wf[5, 130] == vals[w[5, 130]] * 2.0 ** (int(sc[0, 1]) - 127), "fp8 weight block")
codes = rng.integers(0, 16, (3, 64)).astype(np.uint8)
packed = F.pack_fp4(codes)
check(packed.dtype == np.int8 and packed.shape == (3, 32), "pack_fp4 shape")
check((packed.view(np.uint8)[0, 0] & 15) == codes[0, 0] and (packed.view(np.uint8)[0, 0] >> 4)
      == codes[0, 1], "fp4 low nibble = even column")
s4w = rng.integers(120, 130, (3, 2)).astype(np.uint8)
w4 = F.dequant_fp4_weight(packed, s4w)
check(all(w4[r, k] == (e2[codes[r, k] & 7] * (-1 if codes[r, k] & 8 else 1)) *
          2.0 ** (int(s4w[r, k // 32]) - 127) for r in range(3) for k in range(64)),
      "fp4 weight dequant")

print("ok" if failures == 0 else f"{failures} failures")
sys.exit(1 if failures else 0)
