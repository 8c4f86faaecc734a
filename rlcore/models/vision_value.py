"""A vision-language model as a value model (the critic of image prompts).

transformers has a token-classification class (one scalar per token: the text critic's
``AutoModelForTokenClassification``) for text models only; this is its counterpart for a
vision-language folder: the model's trunk (vision encoder, projection, language model) without
its LM head, and a zero-initialised linear ``score`` head on the language model's last hidden
states, called as transformers' models are (``pixel_values`` beside ``input_ids``) and returning
``.logits`` ``[B, L, 1]``, so every pass that reads a text critic's values reads its values.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.modeling_outputs import TokenClassifierOutput

# what transformers' token-classification forward takes that a value pass never sets
_UNUSED = ("labels", "output_attentions", "output_hidden_states", "return_dict", "inputs_embeds")


class VisionValueModel(torch.nn.Module):
    """``vlm``'s trunk (its ``model``: ``LlavaModel``, ``Qwen2VLModel`` ...) with a scalar head
    per token; ``config`` is ``vlm``'s."""

    base_model_prefix = "model"  # (as transformers' models say where their trunk is: peft asks)

    def __init__(self, vlm: Any) -> None:
        super().__init__()
        self.config = vlm.config
        self.model = vlm.model
        weight = next(vlm.parameters())
        hidden = vlm.config.get_text_config().hidden_size
        self.score = torch.nn.Linear(hidden, 1, dtype=weight.dtype, device=weight.device)

    def forward(
        self, input_ids: torch.Tensor | None = None, **kwargs: Any
    ) -> TokenClassifierOutput:
        inputs = {k: v for k, v in kwargs.items() if k not in _UNUSED and v is not None}
        inputs["use_cache"] = False
        hidden = self.model(input_ids=input_ids, **inputs).last_hidden_state
        return TokenClassifierOutput(logits=self.score(hidden))

    def activation_checkpointing_enable(self, **kwargs: Any) -> None:
        """As transformers' models (``enable_gradient_checkpointing``): the trunk's layers."""
        trunk = self.model
        if hasattr(trunk, "activation_checkpointing_enable"):
            trunk.activation_checkpointing_enable(**kwargs)
        else:
            trunk.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs=kwargs.get("activation_checkpointing_kwargs")
            )
