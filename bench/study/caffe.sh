#!/bin/sh
# One run of the Caffe study (annex A of the thesis) for `edgebench exec`: trains NET in MODE
# (cpu | cuda) at BATCH for (IMAGES / BATCH) * EPOCHS iterations, as the study's run script did,
# but on copies of the BVLC solver and model, so nothing in $CAFFE_ROOT is edited and no
# snapshot of a previous run is resumed. glog writes to stderr, where edgebench's `caffe` parser
# reads it; the exit code is Caffe's.
#
# usage: caffe.sh NET MODE BATCH IMAGES EPOCHS      (NET: alexnet | googlenet)
# env:   CAFFE_ROOT (default ~/caffe): the tree with build/tools/caffe and models/bvlc_<net>/
set -eu
[ $# -eq 5 ] || { echo "usage: $0 NET cpu|cuda BATCH IMAGES EPOCHS" >&2; exit 2; }
net=$1 device=$2 batch=$3 images=$4 epochs=$5
root=${CAFFE_ROOT:-$HOME/caffe}
caffe=$root/build/tools/caffe
models=$root/models/bvlc_$net
[ -x "$caffe" ] || { echo "no Caffe binary at $caffe: set CAFFE_ROOT" >&2; exit 2; }
[ -f "$models/solver.prototxt" ] || { echo "no $models/solver.prototxt" >&2; exit 2; }
case $device in
    cpu) mode=CPU ;;
    cuda) mode=GPU ;;
    *) echo "device $device: use cpu or cuda" >&2; exit 2 ;;
esac
[ "$batch" -gt 0 ] || { echo "batch $batch: give a batch of 1 or more" >&2; exit 2; }
iterations=$(( (images / batch) * epochs ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The study's edits: solver mode and max_iter, the training batch_size (the first in the
# model, the TRAIN data layer's), and a display line for every iteration (the thesis, 4.1.2)
# whose loss is that iteration's own (average_loss 1, not the BVLC GoogLeNet's mean of 40);
# snapshots go to the scratch folder.
sed -e "0,/batch_size: [0-9]\+/s//batch_size: $batch/" "$models/train_val.prototxt" > "$work/train_val.prototxt"
sed -e "s/^solver_mode: [A-Z]\+/solver_mode: $mode/" \
    -e "s/^max_iter: [0-9]\+/max_iter: $iterations/" \
    -e "s/^display: [0-9]\+/display: 1/" \
    -e "s/^average_loss: [0-9]\+/average_loss: 1/" \
    -e "s|^net: .*|net: \"$work/train_val.prototxt\"|" \
    -e "s|^snapshot_prefix: .*|snapshot_prefix: \"$work/snapshot\"|" \
    "$models/solver.prototxt" > "$work/solver.prototxt"
grep -q '^solver_mode:' "$work/solver.prototxt" || echo "solver_mode: $mode" >> "$work/solver.prototxt"
grep -q '^display:' "$work/solver.prototxt" || echo "display: 1" >> "$work/solver.prototxt"
cd "$root"
GLOG_logtostderr=1 "$caffe" train -solver="$work/solver.prototxt"
