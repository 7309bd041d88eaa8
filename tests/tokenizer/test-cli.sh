#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# dsv4ctl tokenize / detokenize end to end on the V4 and tiny tokenizers.
#   test-cli.sh DSV4CTL V4_DIR TINY_DIR
set -u
ctl=$1 v4=$2 tiny=$3
n=0 fail=0
check() { # name, expected, actual
  n=$((n + 1))
  if [ "$2" == "$3" ]; then
    echo "ok $n - $1"
  else
    echo "not ok $n - $1"
    echo "# want: $2"
    echo "# got:  $3"
    fail=$((fail + 1))
  fi
}
check "issue vector" "361 688 1527 438 223 6895 22 510 21134 49534 29080 201 40897 100869 33 8567" \
  "$("$ctl" tokenize --model "$v4" $'    int x = 1234;\n中文かなABC\nfoo_bar?!\n')"
check "V4 prompt vector" "128803 30594 128804 128821 36101 128822 7624 1" \
  "$("$ctl" tokenize --model "$v4" '<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>')"
check "stdin bytes equal the argument" "$("$ctl" tokenize --model "$v4" 'héllo wörld')" \
  "$(printf 'h\xc3\xa9llo w\xc3\xb6rld' | "$ctl" tokenize --model "$v4" -)"
check "invalid bytes encode as U+FFFD" "$("$ctl" tokenize --model "$v4" $'a\xef\xbf\xbdb')" \
  "$(printf 'a\xffb' | "$ctl" tokenize --model "$v4" -)"
check "--bos" "0 $("$ctl" tokenize --model "$v4" 'Hi')" "$("$ctl" tokenize --model "$v4" --bos 'Hi')"
check "detokenize renders non-special added tokens, skips specials" "<｜User｜>你好<｜Assistant｜>推理答案" \
  "$("$ctl" detokenize --model "$v4" 128803 30594 128804 128821 36101 128822 7624 1)"
check "detokenize --special" "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>" \
  "$("$ctl" detokenize --model "$v4" --special 128803 30594 128804 128821 36101 128822 7624 1)"
check "chat non-think (tiny)" "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜></think>" \
  "$("$ctl" detokenize --special --model "$tiny" $("$ctl" tokenize --model "$tiny" --chat 'Hello'))"
check "chat think (tiny)" "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜><think>" \
  "$("$ctl" detokenize --special --model "$tiny" $("$ctl" tokenize --model "$tiny" --chat --think 'Hello'))"
"$ctl" detokenize --model "$v4" 129280 >/dev/null 2>&1
check "unknown id is a data error" 65 $?
"$ctl" tokenize --model /nonexistent x >/dev/null 2>&1
check "missing model dir" 66 $?
"$ctl" tokenize --model "$v4" --bos --chat x >/dev/null 2>&1
check "--bos with --chat refused" 64 $?
echo "1..$n"
exit $((fail > 0))
