// SPDX-License-Identifier: MIT
// JS side of tools/bench-tokenizer.c: encode a text file line by line (each
// line with its newline) with the JS reference tokenizer (@lenml/tokenizers),
// time it, write the ids.
//   node bench-tokenizer.js MODEL_DIR TEXT_FILE OUT_IDS
// Prints one line: load_s encode_s n_ids.
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

const [dir, textPath, outPath] = process.argv.slice(2);
const t0 = process.hrtime.bigint();
const readJSON = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: readJSON("tokenizer.json"),
  tokenizerConfig: readJSON("tokenizer_config.json"),
});
const t1 = process.hrtime.bigint();
const text = fs.readFileSync(textPath).toString("utf8");
const t2 = process.hrtime.bigint();
const ids = [];
for (const line of text.split(/(?<=\n)/))
  for (const id of tok.encode(line, { add_special_tokens: false })) ids.push(id);
const t3 = process.hrtime.bigint();
fs.writeFileSync(outPath, Buffer.from(Uint32Array.from(ids).buffer));
const s = (a, b) => Number(b - a) / 1e9;
console.log(`${s(t0, t1)} ${s(t2, t3)} ${ids.length}`);
