"""The trainer every method of this package shares, ``CatalogTrainer``, and its
``CatalogTrainerConfig``: training, the loss dispatch, evaluation while training and publishing.

It sits above ``evaluation`` and ``publishing`` (it evaluates and publishes as it trains) and
below the methods (``metricbert``, ``recobert``, ``ner``); see docs/architecture.md.
"""
