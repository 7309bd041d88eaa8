# SPDX-License-Identifier: MIT
"""`dsv4ctl inspect` on header-only fake checkpoints of the real Flash, Pro and DSpark-Flash
configs (tools/make_fake_checkpoint.py: tensor list from the Python layout, sparse shards with
real names and offsets): the spec §3.4 counts per dtype, tensor totals and byte totals come out
exactly; a checkpoint with a tensor removed, retyped, reshaped and one added gives exactly the
four expected problem lines and exit 1;
unreadable inputs give the documented exit codes.

usage: test_inspect.py DSV4CTL BUILD_DIR
"""
import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CONFIGS = os.path.join(ROOT, "tests", "fixtures", "configs")
MAKE = os.path.join(ROOT, "tools", "make_fake_checkpoint.py")

# Spec §3.1/§3.4 [CKPT]: dtype histogram, tensor count, tensor bytes, shard count.
FLASH = ({"BF16": 433, "F32": 417, "F8_E4M3": 375, "F8_E8M0": 34167, "I64": 3, "I8": 33792},
         69187, 159609485896, 46)
PRO = ({"BF16": 619, "F32": 590, "F8_E4M3": 528, "F8_E8M0": 71952, "I64": 3, "I8": 71424},
       145116, 864704792696, 64)
# DSpark-Flash: Flash without its legacy MTP block (1565 block tensors + e_proj, h_proj with
# scales + enorm, hnorm, norm + 3 hc_head = 1575) plus the 4705 mtp.0-2 tensors of dspark
# spec §10; the drafter lives in shards 46-48 of 48.
DSPARK_COUNT = 69187 - 1575 + 4705

fails = 0


def check(what, ok, detail=""):
    global fails
    print(f"{'ok' if ok else 'not ok'} - {what}" + (f"  # {detail}" if not ok and detail else ""))
    fails += not ok


def make(name, out, shards, *damage):
    subprocess.run([sys.executable, MAKE, "--config", os.path.join(CONFIGS, name), "--out", out,
                    "--shards", str(shards), *damage], check=True, stdout=subprocess.DEVNULL)


def inspect(dsv4ctl, *args):
    p = subprocess.run([dsv4ctl, "inspect", *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def summary_values(out):
    """'tensors N in S shards', per-dtype lines and 'bytes total N' from the summary."""
    lines = out.splitlines()
    hist, count, total, shards = {}, None, None, None
    in_tensors = False
    for ln in lines:
        f = ln.split()
        if ln.startswith("tensors"):
            count, shards, in_tensors = int(f[1]), int(f[3]), True
        elif in_tensors and ln.startswith("  "):
            hist[f[0]] = int(f[1])
        else:
            in_tensors = False
        if ln.startswith("bytes total"):
            total = int(f[2])
    return hist, count, total, shards


def good(dsv4ctl, scratch, name, want):
    hist, count, total, shards = want
    out_dir = os.path.join(scratch, name)
    make(name, out_dir, shards)
    n_files = len([f for f in os.listdir(out_dir) if f.endswith(".safetensors")])
    check(f"{name}: {shards} shard files written", n_files == shards, n_files)
    rc, out, err = inspect(dsv4ctl, "--model", out_dir)
    check(f"{name}: inspect exits 0", rc == 0, err.strip())
    got = summary_values(out)
    check(f"{name}: dtype histogram", got[0] == hist, got[0])
    check(f"{name}: tensor count {count}", got[1] == count, got[1])
    check(f"{name}: tensor bytes {total}", got[2] == total, got[2])
    check(f"{name}: {shards} shards", got[3] == shards, got[3])
    return out_dir, out


def bad(dsv4ctl, scratch, what, damage, want_lines):
    out_dir = os.path.join(scratch, "flash-bad")
    make("flash", out_dir, 4, *damage)
    rc, out, err = inspect(dsv4ctl, "--model", out_dir)
    check(f"{what}: exit 1", rc == 1, f"rc {rc}: {err.strip()}")
    check(f"{what}: problem lines", out.splitlines() == want_lines, out.splitlines()[:6])
    check(f"{what}: count on stderr", f"{len(want_lines)} problem" in err, err.strip())


def main():
    dsv4ctl, build = sys.argv[1], sys.argv[2]
    scratch = os.path.join(build, "inspect-scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)

    flash_dir, out = good(dsv4ctl, scratch, "flash", FLASH)
    check("flash: layer types", "layer types   2 window, 21 CSA, 20 HCA; 3 hash-routed" in out)
    check("flash: MTP block", "  mtp.0       window ratio 0, MTP" in out)
    check("flash: expert bytes",
          "bytes expert  13369344 per routed expert (w1, w2, w3 + scales); 11264 experts, "
          "150592290816" in out)
    check("flash: head", "head          BF16 [129280, 4096], 1059061760 bytes" in out)
    pro_dir, out = good(dsv4ctl, scratch, "pro", PRO)
    check("pro: layer types", "layer types   0 window, 30 CSA, 31 HCA; 3 hash-routed" in out)
    shutil.rmtree(pro_dir)
    ds_dir = os.path.join(scratch, "flash-dspark")
    make("flash-dspark", ds_dir, 48)
    rc, out, err = inspect(dsv4ctl, "--model", ds_dir)
    check("flash-dspark: inspect exits 0", rc == 0, err.strip())
    count = summary_values(out)[1]
    check(f"flash-dspark: tensor count {DSPARK_COUNT}", count == DSPARK_COUNT, count)
    check("flash-dspark: three stages", out.count("window ratio 0, DSpark stage") == 3)
    shutil.rmtree(ds_dir)

    # Four damages in one checkpoint: exactly one line each, in inventory order, then the
    # unexpected tensor (the lines name the tensor, so each damage gives exactly its line).
    drop = ("missing tensor layers.7.attn.wkv.scale (expected F8_E8M0 [4, 32])",
            ["--drop", "layers.7.attn.wkv.scale"])
    retype = ("wrong dtype for layers.0.ffn.gate.tid2eid: I32, expected I64",
              ["--retype", "layers.0.ffn.gate.tid2eid=I32"])
    reshape = ("wrong shape for layers.42.ffn.experts.255.w2.weight: [4096, 2048], "
               "expected [4096, 1024]",
               ["--reshape", "layers.42.ffn.experts.255.w2.weight=4096,2048"])
    extra = ("unexpected tensor layers.43.attn.attn_sink (F32 [64])",
             ["--extra", "layers.43.attn.attn_sink=F32:64"])
    bad(dsv4ctl, scratch, "removed, retyped, reshaped, extra tensor",
        drop[1] + retype[1] + reshape[1] + extra[1], [retype[0], drop[0], reshape[0], extra[0]])

    # Unreadable or malformed inputs.
    rc, _, err = inspect(dsv4ctl)
    check("no --model: exit 64", rc == 64, rc)
    rc, _, err = inspect(dsv4ctl, "--model", os.path.join(scratch, "nowhere"))
    check("missing dir: exit 66, names config.json", rc == 66 and "config.json" in err, err)
    with open(os.path.join(flash_dir, "config.json"), "r+") as f:
        text = f.read()
        f.seek(0)
        f.write(text.replace('"o_groups": 8', '"o_groups": 6'))
        f.truncate()
    rc, _, err = inspect(dsv4ctl, "--model", flash_dir)
    check("malformed config: exit 65, names file and field",
          rc == 65 and "config.json: num_attention_heads 64 is not a multiple of o_groups 6" in err,
          f"rc {rc}: {err.strip()}")
    with open(os.path.join(flash_dir, "config.json"), "w") as f:
        f.write(text)
    os.remove(os.path.join(flash_dir, "model-00017-of-00046.safetensors"))
    rc, _, err = inspect(dsv4ctl, "--model", flash_dir)
    check("missing shard: exit 66, names the shard",
          rc == 66 and "model-00017-of-00046.safetensors" in err, f"rc {rc}: {err.strip()}")

    shutil.rmtree(scratch)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
