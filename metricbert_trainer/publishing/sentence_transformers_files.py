"""The files that make a checkpoint folder a sentence-transformers model as well.

A saved MetricBERT checkpoint is an ``AutoModelForMaskedLM`` folder. Three small JSON files
beside its weights let ``SentenceTransformer(folder)`` load it too, as the encoder followed by
mean pooling over the real tokens, which is exactly how this package embeds items: the
``Transformer`` module reads the encoder from the folder itself (ignoring the MLM head) and the
``Pooling`` module averages its last layer. The layout is sentence-transformers' long-standing
one, which every release from 2.x on loads, so the files need no sentence-transformers here.
"""

from __future__ import annotations

import json
from pathlib import Path

MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
]


def write_sentence_transformers_files(folder: str | Path, *, hidden_size: int, max_seq_length: int) -> None:
    """Writes ``modules.json``, ``sentence_bert_config.json``, ``config_sentence_transformers.json``
    and ``1_Pooling/config.json`` (mean pooling) into ``folder``.

    ``max_seq_length`` should be the training length, so sentence-transformers truncates as the
    training and the ranking evaluation did.
    """
    folder = Path(folder)
    (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    files = {
        "modules.json": MODULES,
        "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
        "config_sentence_transformers.json": {
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
        "1_Pooling/config.json": {
            "word_embedding_dimension": hidden_size,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False,
            "include_prompt": True,
        },
    }
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
