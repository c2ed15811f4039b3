"""The MLM loss over the vocabulary: the decoder's matrix product and the cross-entropy in one step.

``F.cross_entropy(decoder(hidden).float(), targets)`` keeps six tensors of masked tokens x
vocabulary (30,522 words for BERT) alive in a step: the logits, their fp32 copy, the
log-probabilities, the zeros the loss's gradient is scattered into, the gradient of the
log-probabilities and its bf16 copy for the matrix products' backward. Each is allocated and
written afresh every step, and on a CPU a fresh allocation of that size is also page faults: on an
AMX Xeon, where bf16 makes the matrix products cheap, they made the MLM term cost a sixth of the
default recipe's step (``benchmarks/RESULTS.md``, issue #92).

``vocabulary_cross_entropy`` computes the same loss and gradients with one such tensor: the logits
are written once, then, a few rows at a time (small enough to stay in the cache), turned into the
loss and overwritten by their own gradient, ``(softmax - onehot) / N``, which the backward feeds to
the two matrix products. The cross-entropy is in fp32 as before; the logits and their gradient keep
the matrix products' precision (bf16 under autocast), as autocast's casts kept them. On a CPU in
bf16 the rows are padded with zeros to a multiple of ``ROW_MULTIPLE``, whose gradient is zero, so
that the products' shapes repeat from step to step.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

# Rows of logits turned into their gradient at a time: 16 x 30,522 fp32 values are about 2 MiB, a
# core's L2 cache on the AMX Xeon measured (8 to 32 rows ran alike there; fewer rows, more calls).
ROWS_AT_A_TIME = 16
# The masked tokens of a step (N) change from step to step, and on a CPU oneDNN compiles a bf16
# kernel for each new shape of a product: on the AMX Xeon a new N cost about 30 ms in the three
# products of the term, nearly every step. Padded to a multiple of 64 rows, a run sees a few shapes.
# fp32 products (MKL) and a GPU's compile nothing per shape: there the rows are not padded.
ROW_MULTIPLE = 64


# Per head: the decoder it was probed with, and whether the head returns that decoder's output as
# it is. A replaced decoder (``resize_token_embeddings``) is probed again.
_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def head_cross_entropy(
    model: torch.nn.Module, head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """``F.cross_entropy(head(hidden).float(), targets)``, through ``vocabulary_cross_entropy``
    on a CPU where the head's last layer is the model's output embeddings (a linear decoder, as in
    BERT's and RoBERTa's heads) and its parameters are whole on this process; the plain way
    elsewhere: ZeRO-3 and FSDP2 gather a layer's shards only for its own call, other heads may do
    more after the decoder, a GPU's caching allocator keeps the memory that a CPU faults in afresh
    (and its step is bound by kernel launches, which the rows a few at a time would add: not
    measured there), and ``torch.compile`` traces the plain loss as it is."""
    decoder = None
    if hidden.device.type == "cpu" and not torch.compiler.is_compiling():
        decoder = _fusable_decoder(model, head)
    if decoder is None:
        return F.cross_entropy(head(hidden).float(), targets)
    # The head runs as it is, its decoder's call replaced by the loss (the head returns it as is).
    decoder.forward = lambda inputs: vocabulary_cross_entropy(inputs, decoder.weight, decoder.bias, targets)
    try:
        return head(hidden)
    finally:
        del decoder.forward


def _fusable_decoder(model: torch.nn.Module, head: torch.nn.Module) -> torch.nn.Linear | None:
    """The model's output embeddings, when they are a linear layer with whole parameters whose output
    ``head`` returns unchanged; None otherwise."""
    decoder = model.get_output_embeddings()
    if (
        not isinstance(decoder, torch.nn.Linear)
        or isinstance(decoder.weight, DTensor)  # FSDP2 shards
        or hasattr(decoder.weight, "ds_id")  # ZeRO-3 partitions
    ):
        return None
    probed = _PROBED.get(head)
    if probed is None or probed[0] is not decoder:
        probed = _PROBED[head] = (decoder, _returns_decoder_output(model, head, decoder))
    return decoder if probed[1] else None


def _returns_decoder_output(model: torch.nn.Module, head: torch.nn.Module, decoder: torch.nn.Linear) -> bool:
    """Whether ``head`` returns ``decoder``'s output as it is, found by a probe of one row whose
    decoder output is swapped for a marker."""
    if "forward" in vars(decoder) or not any(module is decoder for module in head.modules()):
        return False
    marker = torch.empty(0)
    handle = decoder.register_forward_hook(lambda module, inputs, output: marker)
    try:
        with torch.no_grad():
            probe = torch.zeros(
                1, model.config.hidden_size, dtype=decoder.weight.dtype, device=decoder.weight.device
            )
            returned = head.forward(probe)  # not ``head(probe)``: the head's own hooks see real calls only
    finally:
        handle.remove()
    return returned is marker


def vocabulary_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor
) -> torch.Tensor:
    """The mean cross-entropy of ``hidden @ weight.T + bias`` ([N, V] logits) against ``targets``
    (N word ids, none ignored), equal to ``F.cross_entropy(F.linear(hidden, weight, bias).float(),
    targets)`` under the same autocast, up to the rounding of the gradient's last bit."""
    if targets.numel() == 0:
        raise ValueError("No masked token to score: the caller handles an empty MLM batch.")
    device = hidden.device.type
    precision = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    return _VocabularyCrossEntropy.apply(hidden, weight, bias, targets, precision)


class _VocabularyCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, precision):
        ctx.hidden_dtype, ctx.weight_dtype, ctx.has_bias = hidden.dtype, weight.dtype, bias is not None
        count = targets.numel()
        ctx.count = count
        with torch.autocast(hidden.device.type, enabled=False):
            hidden = hidden.to(precision)
            if hidden.device.type == "cpu" and precision != torch.float32:
                # Zero rows up to a multiple of ROW_MULTIPLE: the products see a few shapes a run.
                hidden = F.pad(hidden, (0, 0, 0, -count % ROW_MULTIPLE))
            cast_weight = weight.to(precision)
            logits = (
                hidden @ cast_weight.T
                if bias is None
                else torch.addmm(bias.to(precision), hidden, cast_weight.T)
            )
            logits[count:] = 0  # the added rows' gradient: they train nothing
            losses = torch.empty(count, dtype=torch.float32, device=hidden.device)
            minus_ones = torch.full((min(count, ROWS_AT_A_TIME), 1), -1.0, device=hidden.device)
            for start in range(0, count, ROWS_AT_A_TIME):
                rows = slice(start, min(start + ROWS_AT_A_TIME, count))
                log_probabilities = torch.log_softmax(logits[rows].float(), dim=1)
                chosen = targets[rows, None]
                losses[rows] = -log_probabilities.gather(1, chosen).squeeze(1)
                gradient = log_probabilities.exp_()
                gradient.scatter_add_(1, chosen, minus_ones[: len(chosen)])
                logits[rows] = gradient.div_(count)
        ctx.save_for_backward(hidden, cast_weight, logits)
        return losses.mean()

    @staticmethod
    def backward(ctx, upstream):
        hidden, cast_weight, gradient = ctx.saved_tensors
        # The loss's own gradient scales the products' results (small) rather than the [N, V] one;
        # on a CPU a scale of 1, the usual one, is seen for free and skipped.
        scale = None if upstream.device.type == "cpu" and upstream.item() == 1.0 else upstream
        hidden_gradient = weight_gradient = bias_gradient = None
        with torch.autocast(hidden.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                hidden_gradient = _scaled((gradient @ cast_weight)[: ctx.count].to(ctx.hidden_dtype), scale)
            if ctx.needs_input_grad[1]:
                weight_gradient = _scaled((gradient.T @ hidden).to(ctx.weight_dtype), scale)
            if ctx.has_bias and ctx.needs_input_grad[2]:
                bias_gradient = _scaled(gradient.sum(0).to(ctx.weight_dtype), scale)
        return hidden_gradient, weight_gradient, bias_gradient, None, None


def _scaled(gradient: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    return gradient if scale is None else gradient.mul_(scale.to(gradient.dtype))
