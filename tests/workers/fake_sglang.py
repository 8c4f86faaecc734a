"""A stand-in for ``sglang.Engine`` (0.5.21) on the CPU, for the SGLang adapter's tests.

Its methods are those of the real engine that rlcore calls, with the real signatures (checked
against the release's source by test_sglang_engine.py through tests/workers/sglang_api.json);
their behaviour is the documented one, computed with a transformers model:

- ``Engine(**server_args)``: refuses a keyword that 0.5.21's ``ServerArgs`` lacks; loads
  ``model_path`` in ``dtype``; samples from a generator seeded with ``random_seed``.
- ``generate(input_ids=[[...], ...], sampling_params={...}, return_logprob=...)``: one output
  dict per request, ``{"text", "output_ids", "meta_info"}``, the ids ending with the stop token
  that ended it (``stop_token_ids``) or at ``max_new_tokens``; temperature 0 is greedy; with
  ``return_logprob``, ``meta_info["output_token_logprobs"]`` holds ``(log-prob, id, None)`` per
  generated token, the log-softmax of the logits over the temperature (SGLang's default).
- ``generate(..., image_data=[[item], ...])``: a vision-language model's request with its images
  in SGLang's ``processor_output`` format (the item a processor's output: ``input_ids``, which
  must be the request's, ``pixel_values``, for Qwen2-VL ``image_grid_thw``), read as the model's
  forward reads them; ``sampling_params["logit_bias"]`` ({token id as a string: bias}) is added
  to the logits before sampling.
- ``update_weights_from_tensor``: loads the named tensors into the model (unknown names raise).
- ``release_memory_occupation``: with ``enable_memory_saver``, the weights are gone (zeroed
  here, as the real engine frees them) until a ``resume_memory_occupation`` and a new update;
  ``generate`` while released raises.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

from tests.workers.sglang_api import load

SERVER_ARGS = set(load()["server_args"])


class Engine:
    def __init__(self, **kwargs):
        unknown = sorted(set(kwargs) - SERVER_ARGS)
        if unknown:
            raise TypeError(f"ServerArgs.__init__() got unexpected keyword arguments {unknown}")
        self.server_args = kwargs
        dtype = getattr(torch, kwargs.get("dtype", "float32"))
        config = json.loads((Path(kwargs["model_path"]) / "config.json").read_text())
        auto = AutoModelForImageTextToText if "vision_config" in config else AutoModelForCausalLM
        self.model = auto.from_pretrained(kwargs["model_path"], dtype=dtype)
        self.model.eval()
        self.generator = torch.Generator().manual_seed(kwargs.get("random_seed") or 0)
        self.released = False
        self.calls: list[str] = []

    def generate(
        self,
        prompt=None,
        sampling_params=None,
        input_ids=None,
        image_data=None,
        audio_data=None,
        video_data=None,
        mm_hashes=None,
        mm_content_hashes=None,
        return_logprob=False,
        logprob_start_len=None,
        top_logprobs_num=None,
        token_ids_logprob=None,
        lora_path=None,
        custom_logit_processor=None,
        require_reasoning=False,
        return_hidden_states=False,
        return_routed_experts=False,
        routed_experts_start_len=0,
        stream=False,
        bootstrap_host=None,
        bootstrap_port=None,
        bootstrap_room=None,
        routed_dp_rank=None,
        disagg_prefill_dp_rank=None,
        kv_hints=None,
        data_parallel_rank=None,
        external_trace_header=None,
        rid=None,
        session_params=None,
        priority=None,
        session_id=None,
        *,
        cache_salt=None,
    ):
        self.calls.append("generate")
        if self.released:
            raise RuntimeError("generate while the engine's memory is released")
        if prompt is not None or not isinstance(input_ids[0], list):
            raise NotImplementedError("the fake takes a batch of token id lists only")
        images = image_data or [None] * len(input_ids)
        return [
            self._one(ids, sampling_params, return_logprob, self._read(ids, items))
            for ids, items in zip(input_ids, images, strict=True)
        ]

    def _read(self, ids: list[int], items: Any) -> dict[str, Any]:
        """A request's ``processor_output`` item as the model's image inputs."""
        if items is None:
            return {}
        (item,) = items  # (one processor output covers a request's images)
        if item.get("format") != "processor_output":
            raise NotImplementedError("the fake reads the processor_output format only")
        if item["input_ids"].tolist() != [ids]:
            raise ValueError("a processor output's input_ids are not its request's")
        inputs = {"pixel_values": item["pixel_values"]}
        if "image_grid_thw" in item:
            inputs["image_grid_thw"] = item["image_grid_thw"]
        return inputs

    @torch.no_grad()
    def _one(
        self, ids: list[int], params: dict, return_logprob: bool, images: dict[str, Any]
    ) -> dict[str, Any]:
        temperature = params.get("temperature", 1.0)
        if params.get("top_p", 1.0) != 1.0 or params.get("top_k", -1) not in (-1, 0):
            raise NotImplementedError("the fake samples without top-p / top-k")
        neutral = {
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
        }  # SamplingParams' own defaults
        if any(params.get(k, v) != v for k, v in neutral.items()):
            raise NotImplementedError(f"the fake samples with {neutral} only")
        stops = set(params.get("stop_token_ids") or [])
        bias = params.get("logit_bias") or {}
        image = getattr(self.model.config, "image_token_id", None)
        tokens, out, logprobs = list(ids), [], []
        for _ in range(params["max_new_tokens"]):
            call = torch.tensor([tokens])
            extra = {}
            if "image_grid_thw" in images:  # (Qwen2-VL's 3-D positions from the placeholders)
                extra["mm_token_type_ids"] = (call == image).int()
            logits = self.model(call, **images, **extra).logits[0, -1].float()
            for token, value in bias.items():
                logits[int(token)] += value
            if temperature == 0:
                token = int(logits.argmax())
            else:
                scaled = torch.log_softmax(logits / temperature, dim=-1)
                token = int(torch.multinomial(scaled.exp(), 1, generator=self.generator))
                logprobs.append((float(scaled[token]), token, None))
            tokens.append(token)
            out.append(token)
            if token in stops:
                break
        finish = "stop" if out and out[-1] in stops else "length"
        meta = {
            "finish_reason": {"type": finish},
            "prompt_tokens": len(ids),
            "completion_tokens": len(out),
        }
        if return_logprob:
            meta["output_token_logprobs"] = logprobs
        return {"text": None, "output_ids": out, "meta_info": meta}

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        self.calls.append("update_weights_from_tensor")
        params = dict(self.model.state_dict())
        with torch.no_grad():
            for name, tensor in named_tensors:
                params[name].copy_(tensor)  # KeyError for a name the model lacks
        if flush_cache:
            self.flush_cache()

    def flush_cache(self):
        self.calls.append("flush_cache")

    def release_memory_occupation(self, tags=None):
        self.calls.append("release_memory_occupation")
        if not self.server_args.get("enable_memory_saver"):
            raise RuntimeError("release_memory_occupation needs enable_memory_saver")
        with torch.no_grad():
            for tensor in self.model.state_dict().values():
                tensor.zero_()
        self.released = True

    def resume_memory_occupation(self, tags=None):
        self.calls.append("resume_memory_occupation")
        self.released = False

    def shutdown(self):
        self.calls.append("shutdown")
