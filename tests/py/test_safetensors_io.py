# SPDX-License-Identifier: MIT
"""safetensors_io: round trip of every dtype through real HF sharding, byte-identical
rewrites, the header-only (sparse) mode, and rejection of malformed headers.
Usage: test_safetensors_io.py [scratch dir]  (meson passes a directory under the build dir)."""
import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import safetensors_io as sio  # noqa: E402

fails = 0


def check(what, ok):
    global fails
    print(f"{'ok' if ok else 'FAIL'}: {what}")
    fails += not ok


def sample_tensors():
    rng = np.random.default_rng(7)
    t = []
    for i, (dt, shape) in enumerate([("BF16", (3, 5)), ("F8_E4M3", (4, 6)), ("F8_E8M0", (1, 3)),
                                     ("I8", (2, 7)), ("F32", (5,)), ("I64", (3, 2)),
                                     ("F16", (2, 2)), ("I32", (9,)), ("U8", (0, 4)),
                                     ("F32", (1,))]):
        st = np.dtype(sio.STORAGE[dt])
        raw = rng.integers(0, 256, size=int(np.prod(shape)) * st.itemsize, dtype=np.uint8)
        t.append((f"t{i}.{dt.lower()}", dt, raw.view(st).reshape(shape)))
    return t


def files_bytes(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))}


def main(scratch):
    t = sample_tensors()
    a, b = os.path.join(scratch, "a"), os.path.join(scratch, "b")
    idx = sio.write_checkpoint(a, t, 3)
    sio.write_checkpoint(b, t, 3)
    check("identical bytes on rewrite", files_bytes(a) == files_bytes(b))
    names = sorted(os.listdir(a))
    check("HF shard names + index", names == [sio.shard_name(k, 3) for k in (1, 2, 3)]
          + [sio.INDEX_NAME])
    ck = sio.load_checkpoint(a)
    check("all tensors back", sorted(ck) == sorted(n for n, _, _ in t))
    check("values and dtypes round-trip",
          all(np.array_equal(ck[n].view(np.uint8), v.view(np.uint8)) and ck.dtypes[n] == dt
              and ck[n].shape == v.shape for n, dt, v in t))
    check("total_size = sum of tensor bytes",
          idx["metadata"]["total_size"] == sum(v.nbytes for _, _, v in t))
    for f in names[:-1]:
        head = open(os.path.join(a, f), "rb").read(8)
        (n,) = struct.unpack("<Q", head)
        entries, meta, start = sio.read_header(os.path.join(a, f))
        check(f"{f}: header padded to 8, data aligned",
              n % 8 == 0 and all(e["data_offsets"][0] % sio.itemsize(e["dtype"]) == 0
                                 for e in entries.values()))
    # Header-only: same headers and index, files extended sparsely to full size.
    h = os.path.join(scratch, "h")
    sio.write_checkpoint(h, [(n, dt, v.shape) for n, dt, v in t], 3, header_only=True)
    ok = open(os.path.join(h, sio.INDEX_NAME)).read() == open(os.path.join(a, sio.INDEX_NAME)).read()
    for f in names[:-1]:
        fa, fh = os.path.join(a, f), os.path.join(h, f)
        ok &= os.path.getsize(fa) == os.path.getsize(fh)
        ok &= sio.read_header(fa) == sio.read_header(fh)
    check("header-only shards match real ones in size, headers, index", ok)
    big = os.path.join(scratch, "big")
    sio.write_checkpoint(big, [("w", "F8_E4M3", (1 << 16, 1 << 15)), ("s", "F32", (4,))], 2,
                         header_only=True)
    st = os.stat(os.path.join(big, sio.shard_name(1, 2)))
    check("header-only file is sparse", st.st_size > 1 << 30 and st.st_blocks * 512 < 1 << 20)
    # Malformed headers are rejected.
    bad = os.path.join(scratch, "bad.safetensors")
    for what, hdr, data in [
            ("hole between tensors", {"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, 8),
            ("size mismatch", {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, 4),
            ("unknown dtype", {"x": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, 1),
            ("trailing bytes", {"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, 2)]:
        text = json.dumps(hdr).encode()
        with open(bad, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"\0" * data)
        try:
            sio.read_header(bad)
            check(f"rejects {what}", False)
        except ValueError:
            check(f"rejects {what}", True)
    return 1 if fails else 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        d = os.path.join(sys.argv[1], "safetensors_io")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        sys.exit(main(d))
    with tempfile.TemporaryDirectory() as d:
        sys.exit(main(d))
