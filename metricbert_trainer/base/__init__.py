"""The primitives every layer of this package builds on: distances, pooling, processes,
checkpoints and model loading. They import nothing of the package but ``errors``
(docs/architecture.md), so evaluation and publishing use them on any encoder.
"""
