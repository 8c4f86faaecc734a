"""A trained policy out of its run folder, in a form that needs no rlcore run to use.

    rlcore export RUN [--step N] OUT

- **Reasoning**: OUT is a Hugging Face model folder (``config.json``, ``model.safetensors``, the
  tokenizer, ``generation_config.json`` with the run's sampling settings and stop tokens) that
  ``transformers.AutoModelForCausalLM.from_pretrained(OUT)`` (and so vLLM or SGLang) loads; with
  a critic, ``OUT/critic`` likewise (``AutoModelForTokenClassification``, one label: the value).
  A vision-language policy loads with ``AutoModelForImageTextToText``, its image processor beside
  it (``AutoImageProcessor.from_pretrained(OUT)``: the pixels the run computed); its critic, which
  transformers has no class for, stays in the checkpoint.
- **Embodied**: OUT holds ``policy.json`` (spaces, network, observation normalisation) and
  ``policy.safetensors``; ``rlcore.load_policy(OUT)`` returns the policy as a callable module,
  observations in, actions out (the mode of the distribution unless ``deterministic=False``).
  An LM policy's language model (LoRA adapters merged) is ``OUT/lm``, a Hugging Face folder
  (``AutoModelForCausalLM``, or ``AutoModelForImageTextToText`` with a vision encoder, loads it;
  its tokenizer beside it unless the policy reads characters); ``policy.safetensors`` then holds
  the state projection and the value head; the policy takes the env's ``Dict`` observations.

The checkpoint is RUN's newest complete one, or ``iter_N`` with ``--step N``; a checkpoint whose
files disagree with its manifest is refused, naming the file. Nothing in it is unpickled. OUT is
written whole or not at all, and ``--force`` replaces only an earlier export (``export_target``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcore.config.errors import ConfigError
from rlcore.config.foreign import current_keys
from rlcore.config.load import validate_config
from rlcore.export_target import check_target, written_whole
from rlcore.log import say
from rlcore.runners.checkpoint import DRIVER_FILE, check_manifest, find_checkpoint
from rlcore.workers.files.state_files import load_state
from rlcore.workers.files.weights_file import read_trained_weights

POLICY_FORMAT = "rlcore-policy/1"


def pick_checkpoint(run: str | Path, step: int | None) -> Path:
    """``run``'s newest complete checkpoint, or its ``iter_{step}`` (refused, naming the file,
    when its files disagree with its manifest)."""
    if step is None:
        return find_checkpoint(str(run), key="export")
    checkpoint = Path(run) / "checkpoints" / f"iter_{step:06d}"
    if not checkpoint.is_dir():
        raise ConfigError(f"--step {step}: {checkpoint} does not exist")
    problem = check_manifest(checkpoint)
    if problem is not None:
        raise ConfigError(f"--step {step}: {checkpoint} cannot be exported: {problem}")
    return checkpoint


def export(
    run: str | Path,
    out: str | Path,
    step: int | None = None,
    env: str | None = None,
    force: bool = False,
) -> Path:
    """Write the policy of ``run``'s checkpoint to ``out`` (see the module docstring). ``env``:
    the run's ``env.id`` when it names a module, which is then imported (without it, a run
    folder never makes export import anything); ``force``: replace an earlier export in ``out``
    (refused when ``out`` holds files that export did not write)."""
    checkpoint = pick_checkpoint(run, step)
    saved = json.loads((checkpoint / DRIVER_FILE).read_text())["config"]
    config = validate_config(current_keys(saved))  # (written by this version or an earlier one)
    if config.mode == "embodied" and ":" in config.env.id and env != config.env.id:
        raise ConfigError(
            f"env.id: {checkpoint} was trained on '{config.env.id}', a module export would "
            "import, running its code; if you trust it, pass --env " + config.env.id
        )
    out = Path(out).expanduser()
    check_target(out, force)
    with written_whole(out, checkpoint) as folder:
        if config.mode == "reasoning":
            _export_language_models(config, checkpoint, folder)
        else:
            _export_policy(config, checkpoint, folder)
    say(f"exported {checkpoint} to {out}")
    return out


# reasoning ---------------------------------------------------------------------------------------


def _export_language_models(config: Any, checkpoint: Path, out: Path) -> None:
    from transformers import GenerationConfig

    from rlcore.data.images import ImageInputs
    from rlcore.models.lm import (
        load_causal_lm,
        load_tokenizer,
        load_value_model,
        vision_tower,
        with_lora,
    )
    from rlcore.prepare import prepare_models

    # The architecture and tokenizer of the run's models (the tiny one from its cache, rebuilt
    # the same if the cache is gone); the trained weights replace theirs.
    dirs = prepare_models(config)
    tokenizer = load_tokenizer(dirs.actor)
    dtype = config.actor.model.dtype
    lora = config.actor.model.lora
    actor = with_lora(load_causal_lm(dirs.actor, dtype), lora)
    _load_exactly(actor, checkpoint / "actor")
    if lora.rank:  # the adapters merged into the weights: a plain model
        actor = actor.merge_and_unload()
    eos = actor.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    r = config.rollout
    actor.generation_config = GenerationConfig(
        do_sample=True,  # the trained policy samples; pass do_sample=False for greedy answers
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=r.top_k,  # 0: no limit (None would be transformers' default of 50)
        max_new_tokens=config.data.max_response_length,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    actor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    vision = vision_tower(actor) is not None
    if vision:  # the image processor the run made its pixels with, beside the model
        ImageInputs.of_folder(dirs.actor, tokenizer).processor.save_pretrained(out)
    if (checkpoint / "critic").is_dir() and vision:
        say(
            "the critic of a vision-language run is not exported (transformers has no "
            "token-classification class for it); its weights stay in the checkpoint"
        )
    elif (checkpoint / "critic").is_dir():
        critic = with_lora(load_value_model(dirs.critic, dtype), lora, value_head=True)
        _load_exactly(critic, checkpoint / "critic")  # as LMCritic builds it
        if lora.rank:
            critic = critic.merge_and_unload()
        critic.save_pretrained(out / "critic")
        load_tokenizer(dirs.critic).save_pretrained(out / "critic")


def _load_exactly(model: torch.nn.Module, folder: Path) -> None:
    """The weights of a component's checkpoint ``folder`` into ``model``; every tensor of each
    must match the other."""
    state = read_trained_weights(folder, model)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ConfigError(
            f"{folder} does not fit the run's model: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]}"
        )


# embodied ----------------------------------------------------------------------------------------


def _export_policy(config: Any, checkpoint: Path, out: Path) -> None:
    from safetensors.torch import save_file

    from rlcore.envs import make_vector_env, space_spec
    from rlcore.workers.embodied.embodied_rollout import make_policy

    envs = make_vector_env(config.env.id, 1, config.env.vector_mode, config.env.kwargs)
    try:
        spec = space_spec(envs, config.env.id)
    finally:
        envs.close()
    model = make_policy(config, spec)
    weights = read_trained_weights(checkpoint / "actor", model)
    env_state = load_state(checkpoint / "env" / "rank0.pt")
    norm = env_state["obs_norm"]
    m = config.actor.model
    described = {
        "format": POLICY_FORMAT,
        "env_id": config.env.id,
        "spec": {
            "obs_shape": list(spec.obs_shape),
            "action_kind": spec.action_kind,
            "action_dims": list(spec.action_dims),
            "action_low": None if spec.action_low is None else spec.action_low.tolist(),
            "action_high": None if spec.action_high is None else spec.action_high.tolist(),
            "obs_scale": spec.obs_scale,
            "action_start": None if spec.action_start is None else list(spec.action_start),
            "obs_one_hot": None
            if spec.obs_one_hot is None
            else [list(spec.obs_one_hot[0]), list(spec.obs_one_hot[1])],
            "obs_text": None if spec.obs_text is None else list(spec.obs_text),
            "obs_image": None if spec.obs_image is None else list(spec.obs_image),
        },
        "model": {
            "hidden_sizes": list(m.hidden_sizes),
            "activation": m.activation,
            "shared_backbone": m.shared_backbone,
            "log_std_init": m.log_std_init,
            # actor.model.cls: the user's class, imported again to load the export
            "cls": m.cls,
        },
        # env rank 0's running statistics (each env rank keeps its own)
        "obs_norm": None if norm is None else {"clip": config.env.clip_obs},
    }
    if m.type == "lm":
        model.load_state_dict(weights)
        _save_language_model(model, out / "lm")
        weights = {k: v for k, v in model.state_dict().items() if not k.startswith("lm.")}
        described["model"] = {
            "type": "lm",
            "action_bins": m.lm.action_bins,
            "tokens": "characters" if model.tokenizer is None else "tokenizer",
        }
    tensors = {f"model.{k}": v.contiguous() for k, v in _unaliased(weights).items()}
    if norm is not None:
        tensors.update({f"obs_norm.{k}": torch.as_tensor(v) for k, v in norm.items()})
    save_file(tensors, str(out / "policy.safetensors"))
    (out / "policy.json").write_text(json.dumps(described, indent=2))


def _save_language_model(policy: Any, folder: Path) -> None:
    """An LM policy's language model as a Hugging Face folder: its LoRA adapters merged into
    the weights they adapt, its tokenizer beside it, and for a vision-language model the pixel
    statistics its images are normalised by (``preprocessor_config.json``)."""
    from peft.tuners.lora import LoraLayer

    lm = policy.lm
    for name, module in list(lm.named_modules()):
        if isinstance(module, LoraLayer):
            module.merge()
            parent, _, child = name.rpartition(".")
            setattr(lm.get_submodule(parent), child, module.get_base_layer())
    lm.config.use_cache = True
    lm.save_pretrained(folder)
    if policy.tokenizer is not None:
        policy.tokenizer.save_pretrained(folder)
    if policy.image_shape is not None:
        stats = {
            "image_mean": policy.pixel_mean.flatten().tolist(),
            "image_std": policy.pixel_std.flatten().tolist(),
        }
        (folder / "preprocessor_config.json").write_text(json.dumps(stats, indent=2))


def _unaliased(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with each shared tensor (a shared trunk under two names) stored as a copy."""
    return {k: v.clone() for k, v in state.items()}


class Policy(torch.nn.Module):
    """An exported embodied policy: ``policy(obs)`` -> actions, for one observation or a batch,
    numpy or torch, raw as the env returns them (normalised here as in training); a language
    env's ``Dict`` observations as the env (or its vector env) returns them, or already
    flattened as rlcore carries them (``envs.language``)."""

    def __init__(self, model: Any, spec: Any, normalizer: Any) -> None:
        super().__init__()
        self.model, self.spec, self.normalizer = model.eval(), spec, normalizer

    @torch.no_grad()
    def forward(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        from rlcore.workers.embodied.env_worker import env_action

        if self.spec.obs_text is not None:
            obs = self._flattened(obs)
        raw = np.asarray(obs)
        if self.spec.obs_one_hot is not None:  # the env's Discrete observations, as trained on
            single = raw.ndim == (0 if len(self.spec.obs_one_hot[0]) == 1 else 1)
            raw = self.spec.encode(raw)
            raw = raw[0] if single else raw
        batch = torch.as_tensor(raw, dtype=torch.float32)
        single = batch.dim() == len(self.spec.obs_shape)
        if single:
            batch = batch[None]
        if self.normalizer is not None:
            batch = self.normalizer(batch, update=False)
        action, _, _ = self.model.act(batch, deterministic=deterministic)
        sent = env_action(self.spec, action)
        return sent[0] if single else sent

    def _flattened(self, obs: Any) -> Any:
        """A language env's observations as one float row each (``envs.language``): its
        ``Dict`` flattened, or rows already flat checked for their width."""
        from rlcore.envs import EnvError
        from rlcore.envs.language import flatten_language

        text_length, _ = self.spec.obs_text
        width = self.spec.obs_shape[0]
        pixels = int(np.prod(self.spec.obs_image)) if self.spec.obs_image else 0
        if isinstance(obs, dict):
            return flatten_language(
                obs, *self.spec.obs_text, (pixels, width - text_length - pixels)
            )
        if np.shape(obs)[-1:] != (width,):
            raise EnvError(
                f"the observation has shape {np.shape(obs)}; this policy reads the env's Dict "
                f"observations, or rows of {width} floats ({text_length} character codes, "
                f"{pixels} pixels, {width - text_length - pixels} state values: "
                "rlcore.envs.language.flatten_language)"
            )
        return obs


def _read_spec(s: dict) -> Any:
    """The ``SpaceSpec`` that ``policy.json``'s ``spec`` describes (keys added since format 0.1
    may be missing: then None)."""
    from rlcore.envs.vector import SpaceSpec

    return SpaceSpec(
        tuple(s["obs_shape"]),
        s["action_kind"],
        tuple(s["action_dims"]),
        None if s["action_low"] is None else np.asarray(s["action_low"], dtype=np.float32),
        None if s["action_high"] is None else np.asarray(s["action_high"], dtype=np.float32),
        s["obs_scale"],
        None if s.get("action_start") is None else tuple(s["action_start"]),  # (0.1: none)
        None if s.get("obs_one_hot") is None else tuple(tuple(x) for x in s["obs_one_hot"]),
        None if s.get("obs_text") is None else tuple(s["obs_text"]),
        None if s.get("obs_image") is None else tuple(s["obs_image"]),
    )


def load_policy(path: str | Path) -> Policy:
    """The policy ``rlcore export`` wrote to ``path`` (an embodied run's)."""
    from safetensors.torch import load_file

    from rlcore.envs.normalization import ObsNormalizer
    from rlcore.models.actor_critic import ActorCritic
    from rlcore.models.user_policy import UserPolicy, load_policy_class

    folder = Path(path)
    described_file = folder / "policy.json"
    if not described_file.is_file():
        raise FileNotFoundError(
            f"{described_file} is missing: give a folder written by `rlcore export` from an "
            "embodied run (a reasoning run's export loads with transformers)"
        )
    described = json.loads(described_file.read_text())
    if described.get("format") != POLICY_FORMAT:
        raise ValueError(
            f"{described_file}: format {described.get('format')!r} is not {POLICY_FORMAT!r}"
        )
    spec = _read_spec(described["spec"])
    m = described["model"]
    tensors = load_file(str(folder / "policy.safetensors"))
    state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    if m.get("type") == "lm":
        model = _load_lm_policy(folder / "lm", spec, m, state)
    elif m.get("cls") is not None:  # a user's policy class (actor.model.cls)
        model = UserPolicy(load_policy_class(m["cls"]), spec, m["cls"])
    else:
        model = ActorCritic(
            spec,
            m["hidden_sizes"],
            m["activation"],
            m["shared_backbone"],
            ortho_init=False,
            log_std_init=m["log_std_init"],
        )
    if m.get("type") != "lm":
        model.load_state_dict(state)
    normalizer = None
    if described["obs_norm"] is not None:
        normalizer = ObsNormalizer(spec.obs_shape, described["obs_norm"]["clip"])
        normalizer.load_state_dict(
            {
                k.removeprefix("obs_norm."): v
                for k, v in tensors.items()
                if k.startswith("obs_norm.")
            }
        )
    return Policy(model, spec, normalizer)


def _load_lm_policy(folder: Path, spec: Any, described: dict, state: dict) -> Any:
    """An exported LM policy: its language model from ``folder``, the rest from ``state``."""
    from types import SimpleNamespace

    from rlcore.models.lm import load_causal_lm, load_tokenizer
    from rlcore.models.lm_policy import LMPolicy

    lm = load_causal_lm(folder, "float32")
    tokenizer = None if described["tokens"] == "characters" else load_tokenizer(folder)
    section = SimpleNamespace(
        path=str(folder), action_bins=described["action_bins"], lora=SimpleNamespace(rank=0)
    )
    model = LMPolicy(spec, section, backbone=(lm, tokenizer))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not name.startswith("lm.") for name in missing):
        raise ValueError(
            f"{folder.parent / 'policy.safetensors'} does not fit its policy.json: missing "
            f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}"
        )
    return model
