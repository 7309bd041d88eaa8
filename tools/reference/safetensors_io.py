# SPDX-License-Identifier: MIT
"""Reading and writing sharded safetensors checkpoints in the Hugging Face layout.

Owns the on-disk container only (no model math): the tiny-fixture generator, the numpy
reference and the inventory tests all go through it, so a checkpoint written here is
byte-for-byte what the C loader will see.

Tensors are kept in their raw storage dtype; the safetensors dtype string travels alongside
because several on-disk formats share one numpy dtype:

    F8_E4M3, F8_E8M0, U8 -> uint8     I8 -> int8      BF16 -> uint16 (raw bits)
    F16 -> float16   F32 -> float32   F64 -> float64  I16 -> int16   I32 -> int32
    I64 -> int64     U16 -> uint16    U32 -> uint32   U64 -> uint64  BOOL -> bool

File format: u64-LE header length n, n bytes of JSON, then the data; data_offsets are relative
to the end of the header and must tile the data region without holes.
"""
import json
import mmap
import os
import struct

import numpy as np

STORAGE = {
    "F8_E4M3": np.uint8, "F8_E8M0": np.uint8, "U8": np.uint8, "I8": np.int8,
    "BF16": np.uint16, "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "I16": np.int16, "I32": np.int32, "I64": np.int64, "U16": np.uint16,
    "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_,
}
INDEX_NAME = "model.safetensors.index.json"


def itemsize(dtype):
    """Bytes per element of a safetensors dtype string."""
    return np.dtype(STORAGE[dtype]).itemsize


def nbytes(dtype, shape):
    n = itemsize(dtype)
    for s in shape:
        n *= int(s)
    return n


def shard_name(k, n):
    """HF shard file name, k counted from 1."""
    return f"model-{k:05d}-of-{n:05d}.safetensors"


class Checkpoint(dict):
    """name -> np.ndarray (raw storage dtype); .dtypes: name -> safetensors dtype string;
    .shard: name -> file name the tensor came from."""

    def __init__(self):
        super().__init__()
        self.dtypes = {}
        self.shard = {}

    def dtype(self, name):
        return self.dtypes[name]


def read_header(path):
    """Parse one safetensors file's header.

    Returns (entries, metadata, data_start): entries maps tensor name to
    {"dtype", "shape", "data_offsets"} (in file order of data_offsets), metadata is the
    "__metadata__" dict (or {}), data_start the absolute file offset of the data region.
    Raises ValueError on anything malformed, naming the file and the field."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8 or n > 100 << 20:
            raise ValueError(f"{path}: header length {n} exceeds file size {size}")
        text = f.read(n)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: header is not JSON: {e}") from None
    metadata = header.pop("__metadata__", {}) or {}
    data_start = 8 + n
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    pos = 0
    for name, e in entries:
        if e.get("dtype") not in STORAGE:
            raise ValueError(f"{path}: {name}: unknown dtype {e.get('dtype')!r}")
        b, end = e["data_offsets"]
        if b != pos or end - b != nbytes(e["dtype"], e["shape"]):
            raise ValueError(f"{path}: {name}: data_offsets {b},{end} do not tile the data")
        pos = end
    if data_start + pos != size:
        raise ValueError(f"{path}: data region is {size - data_start} bytes, header covers {pos}")
    return dict(entries), metadata, data_start


def _shard_files(ckpt_dir):
    idx = os.path.join(ckpt_dir, INDEX_NAME)
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        return sorted(set(wm.values())), wm
    files = sorted(p for p in os.listdir(ckpt_dir) if p.endswith(".safetensors"))
    if not files:
        raise ValueError(f"{ckpt_dir}: no {INDEX_NAME} and no .safetensors file")
    return files, None


def load_checkpoint(ckpt_dir):
    """Load every tensor of a (sharded) checkpoint as read-only arrays mapped from the files.

    Returns a Checkpoint (dict name -> ndarray in raw storage dtype, with .dtypes/.shard)."""
    files, weight_map = _shard_files(ckpt_dir)
    ck = Checkpoint()
    for fn in files:
        path = os.path.join(ckpt_dir, fn)
        entries, _, start = read_header(path)
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.path.getsize(path) else b""
        for name, e in entries.items():
            if name in ck:
                raise ValueError(f"{path}: {name}: also in {ck.shard[name]}")
            if weight_map is not None and weight_map.get(name) != fn:
                raise ValueError(f"{path}: {name}: index maps it to {weight_map.get(name)}")
            dt = np.dtype(STORAGE[e["dtype"]]).newbyteorder("<")
            count = nbytes(e["dtype"], e["shape"]) // dt.itemsize
            a = np.frombuffer(mm, dtype=dt, count=count, offset=start + e["data_offsets"][0])
            ck[name] = a.reshape(e["shape"])
            ck.dtypes[name] = e["dtype"]
            ck.shard[name] = fn
    if weight_map is not None and set(weight_map) != set(ck):
        missing = sorted(set(weight_map) - set(ck))[:3]
        raise ValueError(f"{ckpt_dir}: index names tensors absent from the shards: {missing}")
    return ck


def _normalise(tensors):
    """Accept a dict name -> (dtype, value) or an iterable of (name, dtype, value), where
    value is an ndarray or (header-only) a shape. Returns [(name, dtype, shape, array|None)]."""
    items = tensors.items() if isinstance(tensors, dict) else ((t[0], t[1:]) for t in tensors)
    out = []
    for name, (dtype, value) in items:
        if dtype not in STORAGE:
            raise ValueError(f"{name}: unknown dtype {dtype!r}")
        if isinstance(value, np.ndarray):
            arr = np.ascontiguousarray(value)
            if arr.dtype != np.dtype(STORAGE[dtype]):
                raise ValueError(f"{name}: array dtype {arr.dtype} does not store {dtype}")
            out.append((name, dtype, tuple(int(s) for s in arr.shape), arr))
        else:
            out.append((name, dtype, tuple(int(s) for s in value), None))
    return out


def _split(items, n_shards):
    """Cut the ordered tensor list into n_shards contiguous runs of roughly equal bytes."""
    if not 1 <= n_shards <= len(items):
        raise ValueError(f"n_shards {n_shards} not in 1..{len(items)}")
    sizes = [nbytes(d, s) for _, d, s, _ in items]
    total = sum(sizes)
    shards, cur, acc = [], [], 0
    for i, it in enumerate(items):
        left_items, left_shards = len(items) - i, n_shards - len(shards)
        # Close the current shard when it reached its share, or when every remaining tensor
        # is needed to give each remaining shard one.
        if cur and (acc >= total * (len(shards) + 1) / n_shards or left_items < left_shards):
            shards.append(cur)
            cur = []
        cur.append(it)
        acc += sizes[i]
    shards.append(cur)
    while len(shards) < n_shards:  # only when byte shares end early: split the largest run
        j = max(range(len(shards)), key=lambda k: len(shards[k]))
        shards[j:j + 1] = [shards[j][:-1], shards[j][-1:]]
    return shards


def _header_bytes(items):
    """Data order inside a shard: wider elements first, then by name (keeps every tensor
    aligned to its element size); header JSON compact, padded with spaces to 8 bytes."""
    items = sorted(items, key=lambda it: (-itemsize(it[1]), it[0]))
    hdr = {"__metadata__": {"format": "pt"}}
    pos = 0
    for name, dtype, shape, _ in items:
        end = pos + nbytes(dtype, shape)
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, end]}
        pos = end
    text = json.dumps(hdr, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return items, struct.pack("<Q", len(text)) + text, pos


def write_checkpoint(ckpt_dir, tensors, n_shards, header_only=False):
    """Write tensors as n_shards HF-named shards plus model.safetensors.index.json.

    tensors: dict name -> (dtype, value) or iterable of (name, dtype, value); the given order
    decides which shard a tensor lands in. value is an ndarray in the storage dtype, or (with
    header_only) a shape: then only the headers are written and each shard is extended
    sparsely to its full size. Output bytes depend only on the arguments."""
    items = _normalise(tensors)
    names = [it[0] for it in items]
    if len(set(names)) != len(names):
        raise ValueError("duplicate tensor names")
    if not header_only and any(it[3] is None for it in items):
        raise ValueError("a tensor has no data (header_only=False)")
    os.makedirs(ckpt_dir, exist_ok=True)
    weight_map, total = {}, 0
    for k, shard in enumerate(_split(items, n_shards), 1):
        fn = shard_name(k, n_shards)
        ordered, head, size = _header_bytes(shard)
        path = os.path.join(ckpt_dir, fn)
        with open(path, "wb") as f:
            f.write(head)
            if header_only:
                f.truncate(len(head) + size)
            else:
                for _, dtype, _, arr in ordered:
                    f.write(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
        for name, dtype, shape, _ in shard:
            weight_map[name] = fn
        total += size
    index = {"metadata": {"total_size": total},
             "weight_map": {n: weight_map[n] for n in sorted(weight_map)}}
    with open(os.path.join(ckpt_dir, INDEX_NAME), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return index
