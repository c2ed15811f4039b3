"""The starting model kept frozen beside the one being trained, as a guide against false negatives.

In a homogeneous catalog the closest other element of a batch is often a truly similar item,
and pushing it away teaches the model the opposite of what the ranking wants. The encoder as it
was before training is a cheap witness of that: a mined negative that it already placed closer
to the anchor than the anchor's own positive is suspect. The guide serves two purposes:

- a diagnostic (``guide_negative_closer_rate``): the share of mined negatives the starting model
  ranks above the positive, logged at every logging step;
- a filter (``false_negative_filter``): such candidates are not mined at all, which is
  GISTEmbed's guided in-batch selection (Solatorio, 2024) with the starting model as the guide.

Because the guide never changes, the vector of a text is the same every time it is drawn:
``cache_embeddings`` encodes the catalog once, in length-sorted batches that pad little, and
``embed`` then looks each text up by its token ids instead of running the guide's forward
(``guide_embedding_cache``), held as float32 or, at half the host memory, float16
(``guide_embedding_cache_dtype``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from enum import Enum

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from metricbert_trainer.base.collator import field_inputs, unmasked
from metricbert_trainer.base.distances import Distance, paired_distance, pairwise_distance
from metricbert_trainer.base.modeling import whole_copy
from metricbert_trainer.base.node_memory import node_array
from metricbert_trainer.base.pooling import mean_pool
from metricbert_trainer.data.token_rows import token_key
from metricbert_trainer.evaluation.encoding import encode_texts


def batch_token_keys(inputs: dict[str, torch.Tensor]) -> list[bytes]:
    """Each row's ``token_key`` over its attended tokens: how a padded batch of unmasked inputs
    finds its texts among the keys of the catalog's ``TokenRows``."""
    # In NumPy, not torch: a torch row, its mask and its selection are a dozen dispatched operators
    # per text, more operators a step than all the recipe's own loss terms, and a GPU step is bound
    # by its host's work (benchmarks/RESULTS.md).
    token_ids = inputs["input_ids"].cpu().numpy()
    attended = inputs["attention_mask"].cpu().numpy().astype(bool)
    return [token_key(ids[mask]) for ids, mask in zip(token_ids, attended, strict=True)]


class CacheStorage(str, Enum):
    """The number format of the guide's cached vectors. float16 halves their host memory (2.9 GiB
    per training process for a million items' MiniLM vectors in float32, 29 GiB at ten million)
    and, on the development catalogs, flipped about 3 in 100,000 of the guide's verdicts
    (docs/scale_out.md); the vectors are read back as float32."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"


class StartingModelGuide:
    """A frozen copy of ``model`` (taken at construction) that embeds a batch's elements.

    The copy is whole on every process, also when the model's parameters are already partitioned
    by DeepSpeed ZeRO-3 (transformers loads them so under a ZeRO-3 config): the guide runs
    outside the training engine, on each process's own batch, and a BERT-Large encoder (1.3 GB in
    fp32) fits beside its partitioned twin.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        self.encoder = whole_copy(model.base_model).eval().requires_grad_(False)
        self._cached_rows: dict[bytes, int] = {}
        self._cached_vectors: torch.Tensor | None = None
        # How many processes of this machine hold the cache as one copy (node_memory.node_array).
        self.cache_sharers = 1

    def cache_embeddings(
        self,
        tokenizer: PreTrainedTokenizerBase,
        texts: Sequence[str],
        *,
        keys: Sequence[bytes],
        lengths: np.ndarray,
        max_length: int,
        device: torch.device,
        autocast: Callable[[], AbstractContextManager],
        batch_size: int = 128,
        show_progress: bool = False,
        storage: CacheStorage = CacheStorage.FLOAT32,
    ) -> None:
        """Encodes ``texts`` (every field of the training catalog) once, for ``embed`` to look up;
        ``keys`` and ``lengths`` are each text's ``token_key`` and token count as the collator
        tokenizes it (``max_length``, truncated: ``TokenRows``); ``show_progress`` draws a progress
        bar (a minute or more on a CPU); ``storage``, the vectors' number format in the cache.

        Texts with the same tokens are encoded once, longest first, under the run's ``autocast``,
        so a looked-up vector is the one the guide's forward would give up to rounding. In a
        distributed run every process calls this with the same texts and encodes a share of
        them. The vectors stay on the CPU: a catalog of a million items costs ``2e6 x hidden``
        floats of host memory, not accelerator memory, and the processes of one machine hold one
        copy of them (``node_memory.node_array``), not one each.
        """
        first_rows = {}
        for row, key in enumerate(keys):
            first_rows.setdefault(key, row)
        rows = list(first_rows.values())
        self._move_to(device)
        out = node_array(
            (len(rows), self.encoder.config.hidden_size),
            np.dtype(CacheStorage(storage).value),
            what="the guide's cache",
        )
        with autocast():
            vectors = encode_texts(
                self.encoder,
                tokenizer,
                [texts[row] for row in rows],
                batch_size=batch_size,
                max_length=max_length,
                show_progress=show_progress,
                across_processes=True,
                lengths=np.asarray(lengths)[rows],
                out=out,
            )
        self._cached_rows = {key: row for row, key in enumerate(first_rows)}
        self._cached_vectors = torch.from_numpy(vectors)
        self.cache_sharers = out.sharers

    @property
    def cached_texts(self) -> int:
        """How many distinct texts ``cache_embeddings`` stored (0 without a cache)."""
        return len(self._cached_rows)

    def cache_matrix(self) -> torch.Tensor:
        """[texts, H]: every vector ``cache_embeddings`` stored, one row per distinct text, in the
        cache's ``storage`` format (cast rows, not the whole matrix, to float32 where needed)."""
        if self._cached_vectors is None:
            raise ValueError("The guide holds no cache: call cache_embeddings first.")
        return self._cached_vectors

    def cache_rows(self, keys: Sequence[bytes]) -> np.ndarray:
        """The rows of ``cache_matrix`` that hold the texts with these ``token_key``s, every one
        cached by ``cache_embeddings``."""
        return np.fromiter((self._cached_rows[key] for key in keys), dtype=np.int64, count=len(keys))

    @torch.no_grad()
    def embed(self, batch: dict[str, torch.Tensor], fields: tuple[str, ...]) -> torch.Tensor:
        """Element vectors, field-major ([titles; descriptions]), from the unmasked inputs."""
        self._move_to(batch[f"{fields[0]}_input_ids"].device)
        return torch.cat([self._field_vectors(unmasked(field_inputs(batch, name))) for name in fields])

    def _field_vectors(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """One field's vectors: looked up where the cache holds the text, encoded where not."""
        if self._cached_vectors is None:
            return self._encode(inputs)
        rows = [self._cached_rows.get(key) for key in batch_token_keys(inputs)]
        missing = [position for position, row in enumerate(rows) if row is None]
        if not missing:
            return self._cached_vectors[rows].to(inputs["input_ids"].device, torch.float32)
        vectors = torch.empty(len(rows), self._cached_vectors.shape[1], device=inputs["input_ids"].device)
        found = [position for position, row in enumerate(rows) if row is not None]
        if found:
            vectors[found] = self._cached_vectors[[rows[p] for p in found]].to(vectors.device, vectors.dtype)
        vectors[missing] = self._encode({name: tensor[missing] for name, tensor in inputs.items()}).float()
        return vectors

    def _encode(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return mean_pool(self.encoder(**inputs).last_hidden_state, inputs["attention_mask"])

    def _move_to(self, device: torch.device) -> None:
        if next(self.encoder.parameters()).device != device:
            self.encoder.to(device)

    @staticmethod
    def closer_than_positive(
        guide_vectors: torch.Tensor,
        anchor_index: torch.Tensor,
        positive_index: torch.Tensor,
        margin: float = 0.0,
    ) -> torch.Tensor:
        """[A, N]: True where the guide puts element n closer to anchor a than a's positive is, plus
        ``margin`` (angular distance): with a margin, near-duplicates of the positive count too."""
        distances = pairwise_distance(guide_vectors[anchor_index], guide_vectors, Distance.ANGULAR)
        rows = torch.arange(len(anchor_index), device=distances.device)
        return distances < distances[rows, positive_index][:, None] + margin

    @staticmethod
    def negative_closer_rate(
        guide_vectors: torch.Tensor,
        anchor_index: torch.Tensor,
        positive_index: torch.Tensor,
        negative_index: torch.Tensor,
    ) -> torch.Tensor:
        """The share of mined triplets whose negative the guide ranks above the positive (0-d)."""
        anchors = guide_vectors[anchor_index]
        positive = paired_distance(anchors, guide_vectors[positive_index], Distance.ANGULAR)
        negative = paired_distance(anchors, guide_vectors[negative_index], Distance.ANGULAR)
        return (negative < positive).float().mean()
