"""The BERT regressors behind the `bert` step's contract, and the helpers they share.

    forward(input_ids: int64[B, L], attention_mask: int64[B, L]) -> float32[B, 1]

(`pytorch_libtorch` takes its inputs in forward-argument order: `input__0`, `input__1`).
Two details keep one traced file usable on the CPU and on a GPU:

- the 2-D attention mask is turned into the additive 4-D mask inside the module with
  tensor operations only (transformers 5 builds its own mask with `.to(device=...)` calls
  that a trace would freeze to the tracing device, and skips the mask when a batch has no
  padding, which a trace would freeze too); transformers passes a ready 4-D mask through
  unchanged;
- `token_type_ids` are `zeros_like(input_ids)`, never a tensor created on a device.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch

from ..errors import BertError

#: Poolings of an encoder's output that a linear regression head can sit on.
#: `pooler` is exactly `BertForSequenceClassification`'s head input (the [CLS] state
#: through the pre-trained dense + tanh pooler); `layers_mean` concatenates the masked
#: mean of every transformer layer's output.
POOLINGS = ("pooler", "cls", "mean", "layers_mean")


def additive_mask(attention_mask, dtype):
    """`[B, L]` 0/1 mask -> `[B, 1, 1, L]` additive mask: 0 where kept, the dtype's
    lowest value where padded. Tensor operations only, so a trace holds no device."""
    keep = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - keep) * torch.finfo(dtype).min


def _accepts(module, name: str) -> bool:
    try:
        return name in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False


def pool(outputs, attention_mask, pooling: str):
    """One pooled vector per text from a BERT encoder's outputs (see `POOLINGS`).

    `outputs` must hold `hidden_states` for `layers_mean`."""
    if pooling == "pooler":
        if outputs.pooler_output is None:
            raise BertError("this encoder has no pooler; choose another pooling")
        return outputs.pooler_output
    if pooling == "cls":
        return outputs.last_hidden_state[:, 0]
    weights = attention_mask.to(outputs.last_hidden_state.dtype).unsqueeze(-1)
    count = weights.sum(1).clamp(min=1.0)
    if pooling == "mean":
        return (outputs.last_hidden_state * weights).sum(1) / count
    if pooling == "layers_mean":
        return torch.cat([(h * weights).sum(1) / count for h in outputs.hidden_states[1:]], dim=-1)
    raise BertError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")


class SequenceRegressor(torch.nn.Module):
    """A Hugging Face `*ForSequenceClassification` model with one output, behind the
    `bert` step's contract."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.token_types = _accepts(model, "token_type_ids")

    def forward(self, input_ids, attention_mask):
        dtype = next(self.model.parameters()).dtype
        kwargs = {"input_ids": input_ids, "attention_mask": additive_mask(attention_mask, dtype), "return_dict": False}
        if self.token_types:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        return self.model(**kwargs)[0].float()


class PooledRegressor(torch.nn.Module):
    """A BERT encoder, a pooling (see `POOLINGS`) and a linear head with one output."""

    def __init__(self, encoder, pooling: str, head):
        super().__init__()
        if pooling not in POOLINGS:
            raise BertError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        self.encoder = encoder
        self.pooling = pooling
        self.head = head
        self.token_types = _accepts(encoder, "token_type_ids")

    def pooled(self, input_ids, attention_mask):
        dtype = self.head.weight.dtype
        kwargs = {
            "input_ids": input_ids,
            "attention_mask": additive_mask(attention_mask, dtype),
            "output_hidden_states": self.pooling == "layers_mean",
            "return_dict": True,
        }
        if self.token_types:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        return pool(self.encoder(**kwargs), attention_mask, self.pooling)

    def forward(self, input_ids, attention_mask):
        return self.head(self.pooled(input_ids, attention_mask)).float()


class EagerReference(torch.nn.Module):
    """Hugging Face's own forward (2-D mask, its own mask code): what a trace must match."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits.float()


def encode_texts(tokenizer, texts):
    """Token ids and mask as int64 torch tensors, with the serving tokenizer."""
    ids, mask = tokenizer.encode(list(texts))
    return torch.as_tensor(np.asarray(ids, dtype=np.int64)), torch.as_tensor(np.asarray(mask, dtype=np.int64))


def length_batches(mask, batch_size: int):
    """Index batches in order of token count (a batch is trimmed to its longest row)."""
    lengths = mask.sum(1)
    order = torch.argsort(lengths, stable=True)
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        yield index, max(int(lengths[index].max()), 1)
