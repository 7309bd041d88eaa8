// SPDX-License-Identifier: MIT
// The JS reference tokenizer (@lenml/tokenizers, a transformers.js fork) over
// a corpus, for tests/tokenizer/test-tokenizer-ref.c.
//   node ref-tokenize.js MODEL_DIR CORPUS OUT
// CORPUS: records of (u32 LE byte length, bytes). Each record's bytes become a
// string the way Node decodes UTF-8 (U+FFFD per maximal invalid subpart).
// OUT: per record u32 n, n × u32 ids (no BOS), then for every DECODE_EVERY-th
// record the UTF-8 of decode(ids) and of decode(ids, skip_special_tokens),
// each as u32 length + bytes (the reference's decode is slow: a linear search
// of the added tokens per id).
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

const [dir, corpusPath, outPath] = process.argv.slice(2);
const readJSON = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: readJSON("tokenizer.json"),
  tokenizerConfig: fs.existsSync(cfgPath) ? readJSON("tokenizer_config.json") : {},
});

const corpus = fs.readFileSync(corpusPath);
const parts = [];
const u32 = (v) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};
const str = (s) => {
  const b = Buffer.from(s, "utf8");
  return Buffer.concat([u32(b.length), b]);
};
const DECODE_EVERY = 4;
for (let off = 0, i = 0; off < corpus.length; i++) {
  const len = corpus.readUInt32LE(off);
  const text = corpus.subarray(off + 4, off + 4 + len).toString("utf8");
  off += 4 + len;
  const ids = tok.encode(text, { add_special_tokens: false });
  const b = Buffer.alloc(4 * (ids.length + 1));
  b.writeUInt32LE(ids.length, 0);
  ids.forEach((id, i) => b.writeUInt32LE(id, 4 * (i + 1)));
  parts.push(b);
  if (i % DECODE_EVERY !== 0) continue;
  parts.push(str(tok.decode(ids, { clean_up_tokenization_spaces: false })));
  parts.push(str(tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false })));
}
fs.writeFileSync(outPath, Buffer.concat(parts));
