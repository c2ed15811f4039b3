"""A warning when a run's embeddings collapse onto one direction, as a callback a user can drop.

Hard negatives mined from an untrained or unguarded model have a trivial solution: every text at
the same point, where the triplet loss sits at its margin and no gradient tells items apart. The
logged ``embedding_spread`` (the batch's mean angular distance from its mean direction) falls
towards 0 first, long before the rankings show it, so the warning comes from the logs.
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class CollapseWarningCallback(TrainerCallback):
    """Warns at each log whose ``embedding_spread`` (or ``eval_embedding_spread``) is below ``spread``."""

    def __init__(self, spread: float) -> None:
        self.spread = spread

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        for name in ("embedding_spread", "eval_embedding_spread"):
            value = (logs or {}).get(name)
            if value is not None and value < self.spread:
                logger.warning(
                    "Embedding spread %.4f is below %.4f: the batch's embeddings are collapsing onto one "
                    "direction. Lower the learning rate or the MLM weight, or try negative_pool: other_field.",
                    value,
                    self.spread,
                )
