#!/usr/bin/env bash
# The training examples end to end: train_mlp reaches 90% test accuracy on the digits in a few
# epochs and saves its model; embed_infer loads it and classifies; train_cnn trains too;
# train_lstm (a bidirectional LSTM reading the rows) reaches 95% and embed_infer classifies with
# its model (whose initial states it makes as zeros); --profile
# writes a trace; bad flags and bad files are clear errors. With pointwise fusion on and off
# (WEFT_USE_FUSION), train_mlp reaches the README's 97.5% with the same loss and accuracies every
# epoch (on the CPU a fused group computes what its ops compute, bit for bit). train_gpt (a small
# character-level GPT, with dropout) on the committed fortunes excerpt: its validation loss falls
# each epoch, it saves its model and prints a sample that continues the prompt, and trained in
# bfloat16-mixed its final validation loss is float32's within 2%; embed_infer continues a prompt
# with that model. A model trained in PyTorch (examples/export_digits_onnx.py,
# Debian's python3) and exported as ONNX classifies the digits through embed_infer --onnx.
set -euo pipefail
mlp="$1"; cnn="$2"; infer="$3"; data="$4"; lstm="$5"; fashion="$(dirname "$6")"; resnet="$7"
gpt="$8"; fortunes="$9"; export_onnx="${10}"
prefix="$TEST_TMPDIR/mlp"

out=$("$mlp" --data="$data" --epochs=6 --save_prefix="$prefix")
echo "$out"
acc=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 90.0) }' || { echo "FAIL: train_mlp reached $acc% < 90%"; exit 1; }
grep -q "epoch 6/6 \[=*\] 23/23" <<<"$out" || { echo "FAIL: no progress bar line"; exit 1; }
[ -s "$prefix.safetensors" ] && [ -s "$prefix.json" ] || { echo "FAIL: model not saved"; exit 1; }
[ ! -e "$prefix.safetensors.tmp" ] || { echo "FAIL: a temporary file was left"; exit 1; }

# Fusion on and off: the 20 epochs of the README, the same figures (all but the speed) each epoch.
figures() { sed -n 's/^\(epoch [0-9/]*\) .* samples\/s  ETA [0-9.]*s  \(.*\)$/\1 \2/p'; }
fused=$(WEFT_USE_FUSION=1 "$mlp" --data="$data" --save_prefix="")
unfused=$(WEFT_USE_FUSION=0 "$mlp" --data="$data" --save_prefix="")
for out in "$fused" "$unfused"; do
  acc=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%/\1/p')
  awk -v a="$acc" 'BEGIN { exit !(a >= 97.5) }' || { echo "FAIL: train_mlp reached $acc% < 97.5% (README)"; exit 1; }
done
[ "$(echo "$fused" | figures | wc -l)" = 20 ] || { echo "FAIL: no per-epoch figures in: $fused"; exit 1; }
[ "$(echo "$fused" | figures)" = "$(echo "$unfused" | figures)" ] ||
  { echo "FAIL: train_mlp differs with fusion on and off:"; echo "$fused"; echo "$unfused"; exit 1; }
echo "train_mlp, fusion on and off: $(echo "$fused" | tail -1)"

out=$("$infer" --model="$prefix" --csv="$data" --rows=2)
echo "$out"
grep -qE "^row 0: predicted [0-9] \(p=" <<<"$out" || { echo "FAIL: no prediction printed"; exit 1; }
correct=$(echo "$out" | sed -n 's/^\([0-9]*\) of 1797 rows.*/\1/p')
[ "${correct:-0}" -ge 1617 ] || { echo "FAIL: embed_infer got $correct of 1797 right"; exit 1; }

# A model trained elsewhere: PyTorch's MLP on the digits, exported as ONNX, run by embed_infer.
/usr/bin/python3 "$export_onnx" "$TEST_TMPDIR/digits.onnx"
out=$("$infer" --onnx="$TEST_TMPDIR/digits.onnx" --input_scale=16 --csv="$data" --rows=2)
echo "$out"
grep -qE "^row 0: predicted [0-9] \(score " <<<"$out" || { echo "FAIL: no ONNX prediction printed"; exit 1; }
correct=$(echo "$out" | sed -n 's/^\([0-9]*\) of 1797 rows.*/\1/p')
[ "${correct:-0}" -ge 1707 ] || { echo "FAIL: embed_infer --onnx got $correct of 1797 right"; exit 1; }

out=$("$cnn" --data="$data" --epochs=4 --save_prefix="")
acc=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 85.0) }' || { echo "FAIL: train_cnn reached $acc% < 85%"; exit 1; }

# train_lstm: the digits row by row through a bidirectional LSTM, 95% at least; embed_infer with it.
lprefix="$TEST_TMPDIR/lstm"
out=$("$lstm" --data="$data" --save_prefix="$lprefix")
echo "$out"
acc=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 95.0) }' || { echo "FAIL: train_lstm reached $acc% < 95%"; exit 1; }
grep -q "epoch 15/15 \[=*\] 23/23" <<<"$out" || { echo "FAIL: no progress bar line from train_lstm"; exit 1; }
[ -s "$lprefix.safetensors" ] && [ -s "$lprefix.json" ] || { echo "FAIL: train_lstm's model not saved"; exit 1; }
grep -q '"op": *"RNN"' "$lprefix.json" || { echo "FAIL: no RNN node in lstm.json"; exit 1; }
out=$("$infer" --model="$lprefix" --csv="$data" --rows=2)
echo "$out"
correct=$(echo "$out" | sed -n 's/^\([0-9]*\) of 1797 rows.*/\1/p')
[ "${correct:-0}" -ge 1707 ] || { echo "FAIL: embed_infer --model=lstm got $correct of 1797 right"; exit 1; }

# --profile: a Chrome trace of the training, with the ops' spans and the CPU pool's memory.
trace="$TEST_TMPDIR/mlp_trace.json"
out=$("$mlp" --data="$data" --epochs=1 --save_prefix="" --profile="$trace")
grep -q "wrote the profile to $trace" <<<"$out" || { echo "FAIL: no profile written: $out"; exit 1; }
grep -q '"name":"FullyConnected","cat":"op","ph":"X"' "$trace" || { echo "FAIL: no FullyConnected span in the trace"; exit 1; }
grep -q '"name":"memory cpu","cat":"memory","ph":"C"' "$trace" || { echo "FAIL: no memory counter in the trace"; exit 1; }
if err=$("$mlp" --data="$data" --epochs=1 --save_prefix="" --profile="$TEST_TMPDIR/none/trace.json" 2>&1); then
  echo "FAIL: a profile that cannot be written was accepted"; exit 1
fi
grep -q "cannot write the trace to '$TEST_TMPDIR/none/trace.json'" <<<"$err" || { echo "FAIL: unclear error: $err"; exit 1; }

# A folder of MNIST-format files, gzip-compressed as shipped (the committed Fashion-MNIST slice):
# train-* to train on, t10k-* to test on; --dot writes the bound step.
out=$("$cnn" --data="$fashion" --epochs=2 --save_prefix="" --dot="$TEST_TMPDIR/step.dot")
echo "$out"
grep -q "^1000 training and 200 test samples" <<<"$out" || { echo "FAIL: the slice's split was not used"; exit 1; }
acc=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 50.0) }' || { echo "FAIL: train_cnn on the slice reached $acc% < 50%"; exit 1; }
grep -q "^digraph" "$TEST_TMPDIR/step.dot" && grep -q "Convolution" "$TEST_TMPDIR/step.dot" ||
  { echo "FAIL: --dot wrote no graph of the step"; exit 1; }
if err=$("$cnn" --data="$TEST_TMPDIR" --epochs=1 --save_prefix="" 2>&1); then
  echo "FAIL: a folder without the MNIST files was accepted"; exit 1
fi
grep -q "expected the file train-images-idx3-ubyte.gz" <<<"$err" || { echo "FAIL: unclear error: $err"; exit 1; }

# train_resnet (a narrow one, on the slice) saves its model with BatchNorm's running statistics;
# embed_infer classifies the slice's test images with it exactly as the trainer's Predict did.
rprefix="$TEST_TMPDIR/resnet"
out=$("$resnet" --data="$fashion" --epochs=2 --width=8 --blocks=1 --save_prefix="$rprefix")
echo "$out"
grep -q "epoch 2/2 \[=*\] 8/8" <<<"$out" || { echo "FAIL: no progress bar line from train_resnet"; exit 1; }
acc=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%/\1/p')
grep -q '"op": *"BatchNorm"' "$rprefix.json" || { echo "FAIL: no BatchNorm node in resnet.json"; exit 1; }
out=$("$infer" --model="$rprefix" --mnist="$fashion" --rows=2)
echo "$out"
grep -q "of 200 rows predicted correctly ($acc%)" <<<"$out" ||
  { echo "FAIL: embed_infer's accuracy differs from train_resnet's $acc%"; exit 1; }

# train_gpt on the excerpt (40 KB): three short epochs of a 2-layer model. Its validation loss
# falls every epoch and ends below 3.2 nats, under the 3.31 of the training text's character
# frequencies alone (PyTorch, the same model and schedule without dropout: 2.98 to 3.13 nats).
gprefix="$TEST_TMPDIR/gpt"
out=$("$gpt" --data="$fortunes" --layers=2 --heads=2 --width=32 --context=32 --batch_size=16 \
  --epochs=3 --steps=60 --warmup=10 --lr=1e-2 --dropout=0.1 --val_batches=4 --prompt="The " \
  --sample_chars=40 --save_prefix="$gprefix")
echo "$out"
grep -q "^36223 training and 4025 validation characters, vocabulary 86" <<<"$out" ||
  { echo "FAIL: train_gpt did not split the excerpt 90/10"; exit 1; }
grep -q "epoch 3/3 \[=*\] 60/60  [0-9]* tokens/s" <<<"$out" || { echo "FAIL: no progress bar line from train_gpt"; exit 1; }
val=($(echo "$out" | sed -n 's/.* val loss \([0-9.]*\) nats  [0-9.]* bits\/char$/\1/p'))
[ "${#val[@]}" = 3 ] || { echo "FAIL: expected 3 validation losses, found ${val[*]:-none}"; exit 1; }
awk -v a="${val[0]}" -v b="${val[1]}" -v c="${val[2]}" 'BEGIN { exit !(a > b && b > c && c < 3.2) }' ||
  { echo "FAIL: train_gpt's validation loss did not fall: ${val[*]}"; exit 1; }
# The same training in bfloat16-mixed (--precision): its final validation loss within 2% of
# float32's (on this machine 2.8571 and 2.8680 nats).
mixed=$("$gpt" --data="$fortunes" --layers=2 --heads=2 --width=32 --context=32 --batch_size=16 \
  --epochs=3 --steps=60 --warmup=10 --lr=1e-2 --dropout=0.1 --val_batches=4 --sample_chars=0 \
  --save_prefix= --precision=bfloat16-mixed)
echo "$mixed"
grep -q "adamw, lr 0.01, batch 16, bfloat16-mixed$" <<<"$mixed" ||
  { echo "FAIL: train_gpt --precision=bfloat16-mixed did not say its precision"; exit 1; }
mval=$(echo "$mixed" | sed -n 's/^epoch 3\/3 .* val loss \([0-9.]*\) nats .*/\1/p')
awk -v f="${val[2]}" -v m="${mval:-0}" 'BEGIN { d = m - f; if (d < 0) d = -d; exit !(d <= 0.02 * f) }' ||
  { echo "FAIL: bfloat16-mixed validation loss ${mval:-none}, float32's ${val[2]} (expected within 2%)"; exit 1; }
sample=$(echo "$out" | sed -n '/^sample (temperature 0.8, top-k 20; 40 characters, [0-9]* characters\/s):$/,$p' | tail -n +2)
[ "$(printf '%s' "$sample" | head -c 4)" = "The " ] && [ "$(printf '%s' "$sample" | wc -c)" -ge 44 ] ||
  { echo "FAIL: no sample of 40 characters after the prompt: '$sample'"; exit 1; }
[ -s "$gprefix.safetensors" ] && grep -q '"op": *"Attention"' "$gprefix.json" ||
  { echo "FAIL: train_gpt's model not saved"; exit 1; }
# embed_infer continues a prompt with it (its generation step, with the key-value cache, saved as
# gpt_step.json): 100 characters past the 32-character window, the same ones for the same seed.
grep -q '"op": *"write_at"' "$gprefix"_step.json || { echo "FAIL: no generation step saved"; exit 1; }
out=$("$infer" --model="$gprefix" --prompt="The " --chars=100 --seed=3)
echo "$out"
grep -qE "^100 characters in [0-9.]+ s \([0-9]+ characters/s\)$" <<<"$out" ||
  { echo "FAIL: embed_infer --model=gpt printed no rate"; exit 1; }
[ "$(head -c 4 <<<"$out")" = "The " ] && [ "$(head -n -1 <<<"$out" | wc -c)" -ge 105 ] ||
  { echo "FAIL: embed_infer --model=gpt did not continue the prompt: '$out'"; exit 1; }
[ "$(head -n -1 <<<"$out")" = "$("$infer" --model="$gprefix" --prompt="The " --chars=100 --seed=3 | head -n -1)" ] ||
  { echo "FAIL: embed_infer --model=gpt gave another text for the same seed"; exit 1; }

# --help on every example.
for bin in "$mlp" "$cnn" "$infer" "$lstm" "$resnet" "$gpt"; do
  grep -q "^usage: " <<<"$("$bin" --help)" || { echo "FAIL: $bin --help"; exit 1; }
done

# MNIST idx files (the format train_mlp's --data also reads): the digits as 8x8 images.
images="$TEST_TMPDIR/images.idx3"; labels="$TEST_TMPDIR/labels.idx1"
awk -F, -v images="$images" -v labels="$labels" '
  function be32(n) { return sprintf("%c%c%c%c", int(n / 16777216) % 256, int(n / 65536) % 256, int(n / 256) % 256, n % 256) }
  { for (i = 1; i <= 64; i++) px[NR, i] = $i * 16; lab[NR] = $65; n = NR }
  END {
    printf "%s%s%s%s", be32(2051), be32(n), be32(8), be32(8) > images
    for (r = 1; r <= n; r++) for (i = 1; i <= 64; i++) printf "%c", (px[r, i] > 255 ? 255 : px[r, i]) > images
    printf "%s%s", be32(2049), be32(n) > labels
    for (r = 1; r <= n; r++) printf "%c", lab[r] > labels
  }' LC_ALL=C "$data"
out=$(LC_ALL=C "$mlp" --data="$images,$labels" --epochs=4 --save_prefix="")
acc=$(echo "$out" | sed -n 's/^final test accuracy \([0-9.]*\)%/\1/p')
echo "MNIST idx: $acc%"
awk -v a="$acc" 'BEGIN { exit !(a >= 80.0) }' || { echo "FAIL: train_mlp on MNIST idx files reached $acc%"; exit 1; }

if err=$("$mlp" --optimizer=rmsprop 2>&1); then echo "FAIL: a bad optimizer was accepted"; exit 1; fi
grep -q "expected 'sgd', 'adam' or 'adamw', found 'rmsprop'" <<<"$err" || { echo "FAIL: unclear error: $err"; exit 1; }
if err=$("$mlp" --precision=fp8 2>&1); then echo "FAIL: a bad precision was accepted"; exit 1; fi
grep -q "expected a precision of 'float32', 'bfloat16-mixed' or 'float16-mixed', found 'fp8'" <<<"$err" ||
  { echo "FAIL: unclear error: $err"; exit 1; }
printf '1,2\n3\n' > "$TEST_TMPDIR/bad.csv"
if err=$("$mlp" --data="$TEST_TMPDIR/bad.csv" 2>&1); then echo "FAIL: a ragged CSV was accepted"; exit 1; fi
grep -q "bad.csv" <<<"$err" || { echo "FAIL: the error does not name the file: $err"; exit 1; }
if err=$("$infer" --model="$TEST_TMPDIR/none" 2>&1); then echo "FAIL: a missing model was accepted"; exit 1; fi
grep -q "none.json" <<<"$err" || { echo "FAIL: unclear error: $err"; exit 1; }
# Without a usable GPU (CI), --device=gpu says why it cannot run.
if err=$("$mlp" --device=gpu:0 --epochs=1 --save_prefix="" 2>&1); then
  echo "a GPU is present: train_mlp --device=gpu:0 ran"
else
  grep -q "GPU" <<<"$err" || { echo "FAIL: unclear error for --device=gpu:0: $err"; exit 1; }
  echo "--device=gpu:0 without a GPU: $err"
fi
echo PASS
