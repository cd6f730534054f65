#!/bin/sh
# test_train_eval.sh: the evaluation of `meshgrad train --model gpt` is
# bounded and says what it does: --eval-tokens N reads the first N tokens'
# windows of /val (65536 by default, `all` the whole split) and every
# evaluation reads the same ones; --eval-every never skips even the last
# one; a long evaluation prints its progress (MG_EVAL_PROGRESS_S=0: after
# every chunk); the eval line and the metrics say how many windows it read
# and the seconds it took. Bad values are refused with one line.
. "$(dirname "$0")/check.sh"
program_test_env train_eval
gpt="--model gpt --data $top/data/mobydick.h5 --layers 1 --heads 2 --embd 16 --ctx 16 --batch 8 --log-every 0 --threads 1 --steps 2"

# val_windows TAG: the windows of every val_loss line of $tmp/TAG.jsonl
val_windows() { sed -n 's/.*"val_loss":[^,]*,"eval_windows":\([0-9]*\).*/\1/p' "$tmp/$1.jsonl" | tr '\n' ' '; }

train_run bounded 2 $gpt --mesh 2 --eval-tokens 2048 --eval-every 1
check "--eval-tokens 2048 with ctx 16 reads 128 windows at each evaluation: $(val_windows bounded)" \
    test "$(val_windows bounded)" = "128 128 "
check "... and the eval line says so, with its time" \
    grep -qE '^eval 2 \| val_loss [0-9.]+ \| 128 windows in [0-9.]+ s$' "$tmp/bounded.out"
train_run default 1 $gpt
check "65536 tokens by default: 4096 windows of 16: $(val_windows default)" \
    test "$(val_windows default)" = "4096 "
train_run all 1 $gpt --eval-tokens all
all=$(val_windows all)
check "--eval-tokens all reads every window of /val (${all% }, more than the default's)" \
    test "${all% }" -gt 4096
train_run never 1 $gpt --eval-every never
check "--eval-every never: no evaluation at all" sh -c "! grep -q val_loss $tmp/never.jsonl && ! grep -q '^eval' $tmp/never.out"
check "... and the run ends as usual" grep -q '^done: 2 steps' "$tmp/never.out"
export MG_EVAL_PROGRESS_S=0
train_run progress 1 $gpt --eval-tokens 4096 --batch 64
unset MG_EVAL_PROGRESS_S
check "a long evaluation says how far it got: $(grep -c '^eval 2: ' "$tmp/progress.out") progress lines" \
    grep -qE '^eval 2: [0-9]+/256 windows \([0-9.]+ s\)$' "$tmp/progress.out"

check_refused "eval-tokens 0" 1 "eval-tokens must be >= 1, got 0" $prog train $gpt --eval-tokens 0
check_refused "eval-every sometimes" 1 "eval-every wants an integer or never, got 'sometimes'" \
    $prog train $gpt --eval-every sometimes
check_summary
