# SPDX-License-Identifier: MIT
"""Make numpy's floating-point results independent of the CPU the goldens are generated on.

The reference model's FP8 fake-quant turns last-bit differences into visible logit changes, so
the committed goldens are only reproducible if every run executes the same arithmetic:

* numpy picks SIMD kernels at run time (AVX2, AVX-512, SVML-based exp/log on AVX-512 parts);
  these differ in the last bit between CPUs. NPY_DISABLE_CPU_FEATURES switches every dispatched
  extension off, so all machines run numpy's baseline (SSE/SSE2/SSE3) loops.
* BLAS: Debian's reference BLAS sums in a fixed loop order; if an optimised BLAS is the active
  alternative, one thread and a fixed OpenBLAS core type (or MKL's conditional-numerical-
  reproducibility mode) give the same summation order everywhere.

pin() must run before the caller does any arithmetic: it re-executes the script once with the
environment set (numpy reads these variables only at import).
"""
import os
import sys

MARK = "DSV4_NUMERICS_PINNED"


def pin():
    if os.environ.get(MARK) == "1":
        return
    from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    env = dict(os.environ)
    env[MARK] = "1"
    env["NPY_DISABLE_CPU_FEATURES"] = " ".join(
        f for f in __cpu_dispatch__ if __cpu_features__.get(f))
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    env["MKL_CBWR"] = "COMPATIBLE"
    if __cpu_features__.get("AVX2"):
        env["OPENBLAS_CORETYPE"] = "Haswell"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
