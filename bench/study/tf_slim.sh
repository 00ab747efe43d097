#!/bin/sh
# One run of the TensorFlow study (annex B of the thesis) for `edgebench exec`: TF-Slim's
# train_image_classifier.py with the study's models (alexnet_v2, inception_v1), weight decays
# and data set, on the CPU or the GPU, at BATCH for (IMAGES / BATCH) * EPOCHS steps. TF-Slim
# logs `global step N: loss = L (T sec/step)` through absl/tf.logging on stderr, where
# edgebench's `tensorflow` parser reads it.
#
# usage: tf_slim.sh NET MODE BATCH IMAGES EPOCHS     (NET: alexnet | googlenet)
# env:   TF_SLIM (default ~/models/research/slim): the folder with train_image_classifier.py
#        SLIM_DATASET (default flowers under TF_SLIM): the TFRecord folder, as the study used
set -eu
[ $# -eq 5 ] || { echo "usage: $0 NET cpu|cuda BATCH IMAGES EPOCHS" >&2; exit 2; }
net=$1 device=$2 batch=$3 images=$4 epochs=$5
slim=${TF_SLIM:-$HOME/models/research/slim}
[ -f "$slim/train_image_classifier.py" ] || { echo "no train_image_classifier.py in $slim: set TF_SLIM" >&2; exit 2; }
case $net in
    alexnet) model=alexnet_v2 decay=0.0005 ;;
    googlenet) model=inception_v1 decay=0.0002 ;;
    *) echo "net $net: use alexnet or googlenet" >&2; exit 2 ;;
esac
case $device in
    cpu) clone=True ;;
    cuda) clone=False ;;
    *) echo "device $device: use cpu or cuda" >&2; exit 2 ;;
esac
[ "$batch" -gt 0 ] || { echo "batch $batch: give a batch of 1 or more" >&2; exit 2; }
steps=$(( (images / batch) * epochs ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$slim"
python=${PYTHON:-python3}
"$python" train_image_classifier.py --train_dir="$work" --model_name="$model" \
    --clone_on_cpu="$clone" --dataset_name=flowers --dataset_split_name=train \
    --dataset_dir="${SLIM_DATASET:-$slim/flowers}" --weight_decay="$decay" \
    --batch_size="$batch" --max_number_of_steps="$steps" --log_every_n_steps=1
