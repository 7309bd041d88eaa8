# SPDX-License-Identifier: MIT
"""Number formats of the DeepSeek-V4 checkpoint and its quantisation-aware simulation.

Owns the vectorised numpy encoders/decoders for E4M3, E8M0, E2M1 and BF16, the power-of-two
scale rule (ceil_log2), the activation/KV fake-quant primitives (spec §16.1) and the weight
dequantisers (spec §3.5). Everything here is exact: values are computed in float64 where an
intermediate could round, and every result is returned as float32.
"""
import numpy as np

E4M3_MAX = 448.0
E2M1_MAX = 6.0
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)


def _e4m3_table():
    t = np.empty(256, dtype=np.float32)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e = (c >> 3) & 0xF
        m = c & 7
        if e == 0xF and m == 7:
            t[c] = np.nan
        elif e == 0:
            t[c] = s * m * 2.0 ** -9
        else:
            t[c] = s * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return t


E4M3_VALUES = _e4m3_table()


# ---------------------------------------------------------------------------------------- BF16

def bf16_bits(x):
    """fp32 -> raw bf16 bits (uint16), round to nearest even; NaN stays a quiet NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    b = x.view(np.uint32)
    r = b + np.uint32(0x7FFF)              # wraps only for negative NaNs, fixed below
    r += (b >> 16) & np.uint32(1)
    r = (r >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        r = np.where(nan, ((b >> 16).astype(np.uint16) & 0x8000) | 0x7FC0, r).astype(np.uint16)
    return r


def bf16_to_f32(bits):
    """raw bf16 bits (uint16) -> fp32 (exact)."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def bf16(x):
    """Round fp32 to bf16 (RNE) and widen back to fp32."""
    return bf16_to_f32(bf16_bits(x))


# ------------------------------------------------------------------------------------- E8M0

def e8m0_to_f32(b):
    """E8M0 byte -> 2^(b-127) as fp32 (byte 0 -> 2^-127, an fp32 subnormal); 0xFF -> NaN."""
    b = np.asarray(b, dtype=np.uint8)
    with np.errstate(over='ignore'):
        v = np.ldexp(np.float32(1.0), b.astype(np.int32) - 127).astype(np.float32)
    return np.where(b == 0xFF, np.float32(np.nan), v).astype(np.float32)


def e8m0_from_pow2(v):
    """Exact power of two (2^-127 .. 2^127) -> E8M0 byte. Raises on anything else."""
    v = np.asarray(v, dtype=np.float64)
    m, e = np.frexp(v)
    if not np.all(m == 0.5):
        raise ValueError("e8m0_from_pow2: not a power of two")
    b = e - 1 + 127
    if np.any((b < 0) | (b > 254)):
        raise ValueError("e8m0_from_pow2: exponent out of range")
    return b.astype(np.uint8)


# ------------------------------------------------------------------------------- ceil_log2

def ceil_log2(v):
    """Spec §1: for positive normal fp32 v, E - 127 + (mantissa != 0). Returns int32."""
    v = np.ascontiguousarray(v, dtype=np.float32)
    u = v.view(np.uint32)
    e = ((u >> 23) & 0xFF).astype(np.int32)
    m = (u & 0x7FFFFF) != 0
    return (e - 127 + m.astype(np.int32)).astype(np.int32)


def pow2_scale(amax, inv_max):
    """Power-of-two scale >= amax/max: 2^ceil_log2(fp32(amax * fp32(1/max)))."""
    prod = (np.asarray(amax, dtype=np.float32) * np.float32(inv_max)).astype(np.float32)
    return np.ldexp(np.float32(1.0), ceil_log2(prod)).astype(np.float32)


# ------------------------------------------------------------------- generic RNE rounding

def _round_minifloat(x, min_normal_exp, mant_bits, vmax):
    """Round fp32 x to a minifloat grid (RNE, ties to the even code), saturating at vmax.

    Normal range: round the fp32 bit pattern to `mant_bits` mantissa bits (add half-ulp - 1 plus
    the kept lsb, clear the dropped bits), which is RNE and carries into the exponent exactly.
    Below 2^min_normal_exp the grid is uniform with step 2^(min_normal_exp - mant_bits):
    np.round (half to even) of the exact quotient. Returns float32 (sign kept, NaN kept).
    """
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x)
    drop = 23 - mant_bits
    b = np.ascontiguousarray(a).view(np.uint32)
    r = b + np.uint32((1 << (drop - 1)) - 1)
    r += (b >> drop) & np.uint32(1)
    r &= np.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)
    rn = r.view(np.float32)
    step = np.float32(2.0 ** (min_normal_exp - mant_bits))
    rs = (np.round(a / step) * step).astype(np.float32)
    v = np.where(a < np.float32(2.0 ** min_normal_exp), rs, rn)
    v = np.minimum(v, np.float32(vmax))
    v = np.where(np.isnan(a), a, v)
    return np.copysign(v, x).astype(np.float32)


# ------------------------------------------------------------------------------------- E4M3

def e4m3_round(x):
    """fp32 -> nearest E4M3 value as fp32 (RNE, saturating ±448, NaN stays NaN)."""
    return _round_minifloat(x, -6, 3, E4M3_MAX)


def e4m3_encode(x):
    """fp32 -> E4M3 codes (uint8): RNE, saturating ±448, NaN -> 0x7F / 0xFF (by sign bit)."""
    x = np.asarray(x, dtype=np.float32)
    v = _round_minifloat(x, -6, 3, E4M3_MAX).astype(np.float64)
    a = np.abs(v)
    with np.errstate(divide='ignore', invalid='ignore'):
        _, e = np.frexp(a)
    e = e - 1
    sub = a < 2.0 ** -6
    code_sub = np.round(a * 2.0 ** 9)
    ee = np.where(sub, 0, e)
    mant = np.where(sub, 0, np.ldexp(a, -ee) * 8 - 8)
    code_norm = (ee + 7) * 8 + mant
    code = np.where(sub, code_sub, code_norm)
    code = np.where(np.isnan(code), 0x7F, code).astype(np.uint8)
    neg = np.signbit(x)
    code = np.where(neg, code | 0x80, code).astype(np.uint8)
    return code


def e4m3_decode(c):
    """E4M3 codes (uint8) -> fp32."""
    return E4M3_VALUES[np.asarray(c, dtype=np.uint8)]


# ------------------------------------------------------------------------------------- E2M1

def e2m1_round(x):
    """fp32 -> nearest E2M1 value as fp32 (RNE ties to even code, saturating ±6)."""
    return _round_minifloat(x, 0, 1, E2M1_MAX)


def e2m1_encode(x):
    """fp32 -> E2M1 codes 0..15 (uint8; bit 3 = sign). NaN is not representable (-> 0)."""
    x = np.asarray(x, dtype=np.float32)
    v = np.abs(_round_minifloat(x, 0, 1, E2M1_MAX).astype(np.float64))
    v = np.where(np.isnan(v), 0.0, v)
    # positive values 0,0.5,1,1.5,2,3,4,6 -> codes 0..7
    code = np.searchsorted(E2M1_VALUES[:8].astype(np.float64), v).astype(np.uint8)
    return np.where(np.signbit(x), code | 8, code).astype(np.uint8)


def e2m1_decode(c):
    """E2M1 codes (low 4 bits used) -> fp32."""
    return E2M1_VALUES[np.asarray(c, dtype=np.uint8) & 0x0F]


# ------------------------------------------------------------------------ fake-quant (§16.1)

def _blocks(x, block):
    """View the last axis as [nblk, block], zero-padding a partial last block."""
    x = np.asarray(x, dtype=np.float32)
    n = x.shape[-1]
    nb = -(-n // block)
    if nb * block != n:
        pad = np.zeros(x.shape[:-1] + (nb * block - n,), dtype=np.float32)
        x = np.concatenate([x, pad], axis=-1)
    return x.reshape(x.shape[:-1] + (nb, block)), n


def fp8_quant(x, block):
    """Activation quantisation along the last axis in blocks of `block` (a partial last block
    is its own block). Returns (q, s): q = E4M3 values (fp32), shape of x; s = fp32 power-of-two
    scale per block, shape x.shape[:-1] + (nblk,)."""
    xb, n = _blocks(x, block)
    amax = np.maximum(np.max(np.abs(xb), axis=-1), np.float32(1e-4)).astype(np.float32)
    s = pow2_scale(amax, np.float32(1.0) / np.float32(E4M3_MAX))
    y = np.clip(xb / s[..., None], -E4M3_MAX, E4M3_MAX).astype(np.float32)
    q = e4m3_round(y)
    q = q.reshape(q.shape[:-2] + (-1,))[..., :n]
    return q, s


def fp8_qdq(x, block):
    """fp8_qdq_B of spec §16.1: per block, E4M3 round trip with a power-of-two scale."""
    q, s = fp8_quant(x, block)
    qb, n = _blocks(q, block)
    y = (qb * s[..., None]).astype(np.float32)
    return y.reshape(y.shape[:-2] + (-1,))[..., :n]


def fp4_qdq(x, block=32):
    """fp4_qdq_32 of spec §16.1: per block, E2M1 round trip with a power-of-two scale."""
    xb, n = _blocks(x, block)
    amax = np.maximum(np.max(np.abs(xb), axis=-1),
                      np.float32(6.0 * 2.0 ** -126)).astype(np.float32)
    s = pow2_scale(amax, np.float32(1.0) / np.float32(E2M1_MAX))
    y = np.clip(xb / s[..., None], -E2M1_MAX, E2M1_MAX).astype(np.float32)
    q = e2m1_round(y)
    r = (q * s[..., None]).astype(np.float32)
    return r.reshape(r.shape[:-2] + (-1,))[..., :n]


# ------------------------------------------------------------------- weight dequantisation

def dequant_fp8_weight(w, scale, block=128):
    """FP8 block-scaled weight: w uint8 E4M3 codes [out, in], scale uint8 E8M0
    [ceil(out/Bo), ceil(in/Bi)] -> fp32 [out, in] (exact). block = B or (Bo, Bi)."""
    bo, bi = (block, block) if np.isscalar(block) else tuple(block)
    w = np.asarray(w, dtype=np.uint8)
    out, inn = w.shape
    nbo, nbi = -(-out // bo), -(-inn // bi)
    if scale.shape != (nbo, nbi):
        raise ValueError(f"fp8 scale shape {scale.shape} != {(nbo, nbi)}")
    s = e8m0_to_f32(scale)
    s_full = np.repeat(np.repeat(s, bo, axis=0), bi, axis=1)[:out, :inn]
    return (e4m3_decode(w) * s_full).astype(np.float32)


def unpack_fp4(wp):
    """Packed FP4 [out, in/2] (int8 or uint8) -> codes uint8 [out, in]; low nibble = even column."""
    b = np.asarray(wp).view(np.uint8)
    out, half = b.shape
    c = np.empty((out, half * 2), dtype=np.uint8)
    c[:, 0::2] = b & 0x0F
    c[:, 1::2] = b >> 4
    return c


def pack_fp4(codes):
    """codes uint8 [out, in] (in even) -> packed int8 [out, in/2]; low nibble = even column."""
    c = np.asarray(codes, dtype=np.uint8) & 0x0F
    return ((c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8)).view(np.int8)


def dequant_fp4_weight(wp, scale, group=32):
    """FP4 routed-expert weight: packed I8 [out, in/2] + E8M0 [out, in/32] -> fp32 [out, in]."""
    codes = unpack_fp4(wp)
    out, inn = codes.shape
    if scale.shape != (out, -(-inn // group)):
        raise ValueError(f"fp4 scale shape {scale.shape} != {(out, -(-inn // group))}")
    s = np.repeat(e8m0_to_f32(scale), group, axis=1)[:, :inn]
    return (e2m1_decode(codes) * s).astype(np.float32)
