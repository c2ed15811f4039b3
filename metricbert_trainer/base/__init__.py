"""What every trainer of this package shares, whatever its objective: ``CatalogTrainer`` and its
``CatalogTrainerConfig``, checkpoints, processes, pooling, distances and model loading.

Nothing here imports a method package (``metricbert``, ``recobert``); see docs/architecture.md.
"""
