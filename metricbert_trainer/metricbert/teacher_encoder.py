"""A second frozen encoder that joins the hybrid teacher.

GPL's lesson is that pseudo-labels teach an already trained encoder only as much as the teacher
knows beyond it. The default teacher is the student's own start fused with TF-IDF; this adds
another sentence encoder (one installable offline, such as all-mpnet-base-v2) to its ensemble:
each encoder's ``Metric_Inf`` row is standardised and the rows averaged before TF-IDF's share is
added (``losses.teacher``). The encoder only ever scores texts, so it may have its own tokenizer,
width and architecture.

It never changes, so every text of the catalog is encoded once before training and the batches
look their vectors up, as the guide's cache does: by the digest of the *student's* token ids
(``token_rows.token_key``), which is what a batch carries. A cache file keeps the vectors between runs
(several training seeds of one catalog encode it once), filed by each text's digest under a
fingerprint of the encoder and its ``max_length``, so a subset or a superset of its texts reuses it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerBase

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.distributed import is_first_process
from metricbert_trainer.data.token_rows import TokenRows
from metricbert_trainer.evaluation.embedding_cache import (
    digest_matrix,
    embedding_fingerprint,
    text_digest,
    write_npz_whole,
)
from metricbert_trainer.evaluation.encoding import encode_texts
from metricbert_trainer.metricbert.guide import batch_token_keys

logger = logging.getLogger(__name__)

CACHE_FORMAT = "metricbert-teacher-encoder-v1"


class TeacherEncoder:
    """A frozen encoder (a Hugging Face or sentence-transformers folder, or a Hub id) whose
    mean-pooled vectors of the catalog's texts the teacher term reads."""

    def __init__(self, name_or_path: str, *, trust_remote_code: bool = False) -> None:
        self.name_or_path = name_or_path
        self.tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        self.model = (
            AutoModel.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
            .eval()
            .requires_grad_(False)
        )
        self._rows: dict[bytes, int] = {}
        self._vectors: torch.Tensor | None = None

    def encode_catalog_texts(
        self,
        student_tokenizer: PreTrainedTokenizerBase,
        texts: Sequence[str],
        *,
        max_length: int,
        device: torch.device,
        batch_size: int = 32,
        cache_path: str | Path | None = None,
        show_progress: bool = False,
    ) -> None:
        """Encodes ``texts`` (every field of the training catalog) at ``max_length`` of the teacher's
        own tokens, reusing and then extending the vectors of ``cache_path`` when given, and files
        each under the student's token key (``max_length`` of the student's tokens) for ``vectors``."""
        unique = list(dict.fromkeys(texts))
        if cache_path and Path(cache_path).exists() and not is_teacher_cache(Path(cache_path)):
            raise ValueError(
                f"{cache_path} is not a teacher-encoder cache (an .npz this library wrote), so it is not replaced; "
                "name another file for teacher_encoder_cache."
            )
        fingerprint = embedding_fingerprint(self.model, self.tokenizer, {}, max_length=max_length)
        stored = _read_cache(Path(cache_path), fingerprint) if cache_path else {}
        missing = [text for text in unique if text_digest(text) not in stored]
        if missing:
            self.model.to(device)
            encoded = encode_texts(
                self.model,
                self.tokenizer,
                missing,
                batch_size=batch_size,
                max_length=max_length,
                show_progress=show_progress,
                across_processes=True,
            )
            # Back on the host: training needs only the vectors, not the encoder's accelerator memory.
            self.model.to("cpu")
            stored.update(zip(map(text_digest, missing), encoded, strict=True))
            if cache_path and is_first_process():
                _write_cache(Path(cache_path), fingerprint, stored)
        logger.info(
            "Teacher encoder %s: %d texts, %d read from its cache, %d encoded.",
            self.name_or_path,
            len(unique),
            len(unique) - len(missing),
            len(missing),
        )
        vectors = np.stack([stored[text_digest(text)] for text in unique])
        self._rows = {
            key: row for row, key in enumerate(TokenRows.tokenize(student_tokenizer, unique, max_length).keys)
        }
        self._vectors = torch.from_numpy(vectors)

    def vectors(self, batch: dict[str, torch.Tensor], fields: tuple[str, ...]) -> torch.Tensor:
        """Element vectors, field-major ([titles; descriptions]), of the batch's unmasked texts."""
        if self._vectors is None:
            raise ValueError("The teacher encoder holds no vectors: call encode_catalog_texts first.")
        keys = [key for name in fields for key in batch_token_keys(unmasked(field_inputs(batch, name)))]
        rows = [self._rows.get(key) for key in keys]
        if None in rows:
            raise KeyError(
                "A batch text is not among the texts the teacher encoder encoded before training "
                "(it encodes the training catalog's)."
            )
        return self._vectors[rows].to(batch[f"{fields[0]}_input_ids"].device)


def is_teacher_cache(path: Path) -> bool:
    """Whether ``path`` is an .npz archive laid out as ``_write_cache`` writes one."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            return "format" in stored.files and str(stored["format"]) == CACHE_FORMAT
    except (OSError, ValueError, EOFError):
        return False


def _read_cache(path: Path, fingerprint: str) -> dict[bytes, np.ndarray]:
    """The vectors ``path`` holds by text digest; none when it is absent or another encoder's."""
    if not path.is_file():
        return {}
    with np.load(path, allow_pickle=False) as stored:
        if str(stored["fingerprint"]) != fingerprint:
            logger.info("%s holds another encoder's or max_length's vectors; encoding anew.", path)
            return {}
        return dict(zip((row.tobytes() for row in stored["digests"]), stored["vectors"], strict=True))


def _write_cache(path: Path, fingerprint: str, vectors: dict[bytes, np.ndarray]) -> None:
    write_npz_whole(
        path,
        format=np.array(CACHE_FORMAT),
        fingerprint=np.array(fingerprint),
        digests=digest_matrix(list(vectors)),
        vectors=np.stack(list(vectors.values())),
    )
