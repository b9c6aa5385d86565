#!/usr/bin/env bash
# bench/s29_any.sh: session 29's call on whatever GPU comes: on an H200 the closing call of issue 4
# (bench/h200_s27b.sh: the persistent form's diffs and decode timings, then bench/h200_s24.sh
# whole with the faster form), else bench/s29a.sh (ncu of the persistent form, the decode forms
# against tokens per sequence). Carry: .dev/pack .whl
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$name" in
  *H200*) exec bash bench/h200_s27b.sh ;;
  *) exec bash bench/s29a.sh ;;
esac
