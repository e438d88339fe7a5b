#!/usr/bin/env bash
# Does split-K pay just past space.split_k_pays? Each layer of a TOML file (TOML, default
# studies/unseen-split-k-band.toml) gets two default searches on one H200 with the same trial
# count and seed: without --split-k (study NAME) and with it (study NAME_split), each followed
# by its export used as an application would (h200x2-unseen.sh). Everything lands in
# $OUT/unseen.tgz.
#   h200-split-k-band.sh [LAYER ...]      (TRIALS, default 24; LIMIT seconds a search, default 150)
set -u
here=$(dirname "$0")
toml=${TOML:-$here/../unseen-split-k-band.toml}
export SKIP_SETUP=1 GPUS=0 LIMIT=${LIMIT:-150} ONLY="$*"
SEARCH_ARGS="--trials ${TRIALS:-24}" bash "$here/h200x2-unseen.sh" "$toml" || exit
SEARCH_ARGS="--trials ${TRIALS:-24} --split-k" SUFFIX=_split bash "$here/h200x2-unseen.sh" "$toml"
