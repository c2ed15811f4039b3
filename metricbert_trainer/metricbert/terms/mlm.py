"""The masked-language-model term, ``mlm_weight * L_MLM``, raised from 0 over its first steps."""

from __future__ import annotations

from metricbert_trainer.base.distributed import share_of_global_mean
from metricbert_trainer.metricbert.terms.step import StepVectors, TermValue


class MlmTerm:
    """The model's MLM loss over the batch's masked tokens, weighted ``mlm_weight`` once its ramp
    (``mlm_weight_ramp_steps``) is over. Its loss is logged even at weight 0, where it trains
    nothing, so a run without the term still shows what the encoder does to the head's task."""

    name = "mlm"

    def __init__(self, weight: float, ramp_steps: int = 0) -> None:
        self.weight = weight
        self.ramp_steps = ramp_steps

    def weight_at(self, global_step: int) -> float:
        """``weight``, raised linearly from 0 over the first ``ramp_steps`` steps."""
        if self.ramp_steps == 0:
            return self.weight
        return self.weight * min(1.0, (global_step + 1) / self.ramp_steps)

    def __call__(self, step: StepVectors) -> TermValue:
        mlm_loss = step.outputs["mlm_loss"]
        if step.shard is not None:
            # Per masked token of every process; its mean over processes (as logged) is that mean.
            tokens = step.outputs["mlm_tokens"]
            mlm_loss = share_of_global_mean(mlm_loss * tokens, tokens, step.shard)
        loss = self.weight_at(step.global_step) * mlm_loss if self.weight > 0 else None
        return TermValue(loss, {"mlm_loss": mlm_loss.detach()})
