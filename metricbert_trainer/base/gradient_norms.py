"""How hard each term of a summed loss pulls on the shared encoder.

A loss like ``L_MLM + lambda * L_T + mu * L_distill`` is balanced by its gradients, not by its
values: a term worth 1% of the loss can still move the encoder most, and a large term can be
flat, so the balance is measured that way. Each weighted term gets its own
backward pass over the encoder's parameters (``torch.autograd.grad``, the graph kept for the
step's own backward, nothing written into ``.grad``), so measuring costs one extra backward per
term on the steps it runs and leaves the training step exactly as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def term_gradient_norms(
    terms: Mapping[str, torch.Tensor], parameters: Sequence[torch.nn.Parameter]
) -> dict[str, float]:
    """The L2 norm of each (weighted) term's gradient with respect to ``parameters``; 0 for a term
    that does not depend on them."""
    norms = {}
    for name, term in terms.items():
        if not term.requires_grad:
            norms[name] = 0.0
            continue
        gradients = torch.autograd.grad(term, parameters, retain_graph=True, allow_unused=True)
        found = [torch.linalg.vector_norm(gradient.float()) for gradient in gradients if gradient is not None]
        norms[name] = float(torch.linalg.vector_norm(torch.stack(found))) if found else 0.0
    return norms
