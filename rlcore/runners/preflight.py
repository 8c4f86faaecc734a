"""The run's inputs, checked before any process starts: model folders, prompt files, the custom
reward function, the env id, the checkpoint to resume from, and Ray when the plan needs it.

``preflight`` runs in every entry point after the config and placement checks, for
``runner.dry_run=true``, ``rlcore placement`` and a real start alike, so a dry run refuses what the
run would refuse later inside a worker. It calls the same functions the workers and the driver
call when they load these inputs, so the two cannot disagree. It builds nothing: the tiny model and
its warm-up are left to the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcore.config.checks.reasoning import calculator_missing
from rlcore.config.errors import ConfigError
from rlcore.config.schema import EmbodiedConfig, ReasoningConfig, RLCoreConfig
from rlcore.data.prompts import DataError
from rlcore.data.sampler import check_prompt_files, load_prompt_set
from rlcore.envs import make_vector_env, space_spec
from rlcore.models.actor_critic import check_image_shape
from rlcore.models.hub import MODEL_FILES, is_hub_id, local_model_dir
from rlcore.models.lm import check_model_dir, check_positions
from rlcore.models.lm_policy import check_lm_policy
from rlcore.models.user_policy import check_user_policy
from rlcore.placement import PlacementPlan, runs_in_driver
from rlcore.rewards import load_custom_fn
from rlcore.rewards.judge import check_judge, compile_parser, read_template
from rlcore.rewards.model import check_reward_model
from rlcore.rewards.remote import check_reachable
from rlcore.runners.checkpoint import (
    DRIVER_FILE,
    check_resumable,
    check_run_folder,
    checkpoint_to_resume,
)
from rlcore.runners.files import check_no_links
from rlcore.tools.protocol import load_interaction, load_tools, schema
from rlcore.tools.python import PythonInterpreter, check_sandbox
from rlcore.workers.embodied.env_worker import check_envs_can_be_saved, check_pickled_envs


def preflight(config: RLCoreConfig, plan: PlacementPlan) -> None:
    """Raise ``ConfigError`` listing every input of ``config`` that the run could not load."""
    problems: list[str] = []

    def attempt(check: Callable[..., Any], *args: Any) -> None:
        try:
            check(*args)
        except (ConfigError, DataError) as error:  # EnvError is a ConfigError
            problems.append(str(error))

    if isinstance(config, ReasoningConfig):
        _reasoning(config, attempt)
    else:
        attempt(_probe_env, config)
    attempt(_check_resume, config, plan)
    attempt(check_run_folder, config)
    attempt(_check_links, config)
    attempt(_check_ray, config, plan)
    if problems:
        raise ConfigError("\n".join(problems))


def _reasoning(config: ReasoningConfig, attempt: Callable[..., None]) -> None:
    for setting, path in (
        ("actor.model.path", config.actor.model.path),
        ("critic.model_path", config.critic.model_path if config.derived.critic_model else None),
    ):
        if path is not None:
            attempt(_check_model, path, setting, config)
    if config.actor.model.path is None:
        attempt(check_positions, None, config.data, "actor.model.path")
    data = config.data
    tokenizer = _tokenizer_here(config)
    for train, files, what in (
        (True, data.train_files, "data.train_files"),
        (False, data.val_files, "data.val_files"),
    ):
        if tokenizer is not None:
            attempt(_check_prompt_set, config, tokenizer, train)
        elif files:
            attempt(check_prompt_files, config, files, what)
    reward = config.reward
    if reward.rules.custom_fn is not None:  # (validation refused it where no row reads it)
        attempt(load_custom_fn, reward.rules.custom_fn, config.data.answer_key)
    used = {reward.kind, *reward.sources.values()}
    if "remote" in used and reward.remote.url is not None:
        attempt(check_reachable, reward.remote.url)
    if "model" in used and reward.model.path is not None:
        attempt(check_reward_model, reward.model.path)
    if "judge" in used and reward.model.path is not None:
        attempt(check_judge, reward.model.path)
    if "judge" in used and reward.judge.template is not None:
        attempt(read_template, reward.judge.template)
    if "judge" in used:
        attempt(compile_parser, reward.judge.parser)
    attempt(_check_megatron_models, config)
    lora = config.actor.model.lora
    if lora.rank and config.actor.model.path is not None:
        attempt(_check_lora_targets, config.actor.model.path, "actor.model.path", lora)
    if config.rollout.multi_turn:
        attempt(_check_tools, config)


def _tokenizer_here(config: ReasoningConfig) -> Any:
    """The actor's tokenizer when its folder is here already (a path, a hub id in the local
    cache, the tiny model a run built); ``None`` otherwise (a download, a first build, or a
    folder ``_check_model`` refuses)."""
    from rlcore.models.lm import load_tokenizer
    from rlcore.prepare.models import cached_tiny_model

    path = config.actor.model.path
    try:
        if path is None:
            folder = cached_tiny_model(config)
        elif is_hub_id(path):  # (the local cache only: _check_model says what it downloads)
            from huggingface_hub import snapshot_download

            folder = Path(
                snapshot_download(path, local_files_only=True, allow_patterns=MODEL_FILES)
            )
        else:
            folder = Path(path).expanduser()
        return None if folder is None else load_tokenizer(folder)
    except Exception:  # (no tokenizer here yet, or a folder _check_model refuses: rows counted)
        return None


def _check_prompt_set(config: ReasoningConfig, tokenizer: Any, train: bool) -> None:
    """A prompt set built as the run builds it (``load_prompt_set``: read, scored, tokenised,
    those too long dropped), so the dry run refuses fewer usable training prompts than
    ``data.train_batch_size`` as the run does; at a start it is kept for the run to take (what
    it read and dropped said here, once)."""
    try:
        tools = [schema(t) for t in load_tools(config.rollout.tools).values()] or None
    except ConfigError:
        return  # (``_check_tools`` names the tool it cannot load)
    load_prompt_set(config, tokenizer, train, tools, keep=not config.runner.dry_run)


def _check_tools(config: ReasoningConfig) -> None:
    """The tool classes (the protocol, distinct names), the interaction, and a way to find the
    calls: the model's chat template (Hermes format) or ``rollout.tool_call_regex``; for the
    python tool (or a subclass), that its sandbox starts here."""
    rollout = config.rollout
    tools = load_tools(rollout.tools)
    warm_up = config.actor.model.path is None and config.warmup.steps
    if warm_up and "calculator" not in tools:  # (by the names the tools declare)
        raise ConfigError(calculator_missing(tools))
    if warm_up and "expression" not in tools["calculator"].parameters.get("properties", {}):
        raise ConfigError(
            f"rollout.tools: the warm-up's calls give calculator {{'expression': ...}}, and the "
            f"parameters of {type(tools['calculator']).__name__} name no 'expression'; take it, "
            "or set warmup.steps=0"
        )
    if any(isinstance(tool, PythonInterpreter) for tool in tools.values()):
        check_sandbox()
    if rollout.interaction is not None:
        load_interaction(rollout.interaction)
    path = config.actor.model.path
    folder = local_model_dir(path, "actor.model.path", download=False) if path else None
    if folder is not None and rollout.tool_call_regex is None:
        from rlcore.models.lm import load_tokenizer

        if getattr(load_tokenizer(folder), "chat_template", None) is None:
            raise ConfigError(
                f"rollout.tools: {path} has no chat template, so its tool-call format is "
                "unknown; give rollout.tool_call_regex (named groups name and arguments)"
            )


def _check_model(path: str, setting: str, config: ReasoningConfig) -> None:
    """The model ``setting`` names: its folder (a hub id's in the local cache; one the run would
    download is said so and not checked further) checked as the run checks it."""
    folder = local_model_dir(path, setting, download=False)
    if folder is not None:
        check_model_dir(str(folder), setting, tokenizer=setting == "actor.model.path")
        check_positions(folder, config.data, setting)
        hf = config.rollout.hf
        if setting == "actor.model.path" and config.rollout.backend == "hf" and hf.static_cache:
            _check_static_decode(folder)


def _check_static_decode(folder: Any) -> None:
    """The static decode loop serves the model: its layers all attend fully (the engine checks
    the loaded model the same way)."""
    from transformers import AutoConfig

    from rlcore.workers.reasoning.static_decode import check_full_attention

    model_config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    name = (getattr(model_config, "architectures", None) or [model_config.model_type])[0]
    check_full_attention(model_config, name)


def _check_lora_targets(path: str, setting: str, lora: Any) -> None:
    """``lora.target_modules`` in the model of the folder ``setting`` names (``with_lora``'s
    check), the model built from its config on the meta device: no memory, no weights read.
    A folder the run would download, or one transformers cannot build, is left to the run
    (``_check_model`` names the latter)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    from rlcore.models.lm import check_lora_targets, vision_tower

    folder = local_model_dir(path, setting, download=False)
    if folder is None:
        return
    try:
        hf_config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
        vision = hasattr(hf_config, "vision_config")
        auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
        with torch.device("meta"):
            model = auto.from_config(hf_config, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError):
        return
    key = setting.removesuffix(".path") + ".lora"  # (actor.model.lora, actor.model.lm.lora)
    tower = vision_tower(model) if key == "actor.model.lora" else None  # (as with_lora's)
    check_lora_targets(model, lora.target_modules, f"{key}.target_modules", tower)


def _check_megatron_models(config: ReasoningConfig) -> None:
    """A component on the Megatron backend trains a model the conversion covers, split by its
    tensor- and pipeline-parallel sizes (read from the model folder's config.json; the tiny
    model's shape from the config)."""
    from rlcore.models.megatron import (
        check_convertible,
        check_pipeline_parallel,
        check_tensor_parallel,
    )

    trained = [("actor", config.actor, config.actor.model.path)]
    if config.derived.critic_model:
        trained.append(
            ("critic", config.critic, config.critic.model_path or config.actor.model.path)
        )
    for name, section, path in trained:
        if section.training_backend != "megatron":
            continue
        if path is None:
            from transformers import Qwen2Config

            from rlcore.models.lm import tiny_kv_heads

            tiny = config.actor.model.tiny
            hf_config = Qwen2Config(
                num_attention_heads=tiny.num_heads,
                hidden_size=tiny.hidden_size,
                num_hidden_layers=tiny.num_layers,
                num_key_value_heads=tiny_kv_heads(tiny.num_heads),
            )
        else:
            from transformers import AutoConfig

            try:
                folder = local_model_dir(path, f"{name}.model.path", download=False)
                if folder is None:
                    continue  # (the run downloads it, and checks it then)
                hf_config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
            except (OSError, ValueError, ConfigError):
                continue  # _check_model names the folder's problem
        check_convertible(hf_config, f"{name}.training_backend")
        check_tensor_parallel(
            hf_config,
            section.megatron.tensor_parallel_size,
            f"{name}.megatron.tensor_parallel_size",
        )
        check_pipeline_parallel(
            hf_config,
            section.megatron.pipeline_parallel_size,
            f"{name}.megatron.pipeline_parallel_size",
        )


def _probe_env(config: EmbodiedConfig) -> None:
    """One copy of the env, made and checked as the env worker makes its envs, then closed."""
    grouped = config.algorithm.group_size > 1
    envs = make_vector_env(
        config.env.id, 1, config.env.vector_mode, config.env.kwargs, seeds_per_env=grouped
    )
    try:
        spec = space_spec(envs, config.env.id)
        check_image_shape(spec.obs_shape, config.env.id)
        if config.actor.model.cls is not None:
            check_user_policy(config.actor.model.cls, spec)
        lm = config.actor.model.lm
        if config.actor.model.type == "lm":
            check_lm_policy(spec, lm, config.env.normalize_obs)
            if lm.lora.rank and lm.path is not None:
                _check_lora_targets(lm.path, "actor.model.lm.path", lm.lora)
        if config.runner.checkpoint_every and config.env.checkpoint_state == "pickle":
            check_envs_can_be_saved(envs, config.env.id)
    finally:
        envs.close()


def _check_ray(config: RLCoreConfig, plan: PlacementPlan) -> None:
    """A plan of several processes (or a cluster to join) runs on Ray; one process needs none."""
    if runs_in_driver(plan, config.cluster.address):
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"cluster.component_placement: this plan runs {len(plan.processes())} processes, "
            "which needs Ray (pip install ray); place every component on one slot (e.g. "
            "actor,rollout,env: 0) to run in this process without it"
        ) from None


def _check_links(config: RLCoreConfig) -> None:
    """The run folder a run would continue holds no link (``check_no_links``)."""
    run = config.runner
    if run.resume_dir:
        folder = Path(run.resume_dir)
        if (folder / DRIVER_FILE).is_file():  # a checkpoint: RUN/checkpoints/iter_K
            folder = folder.parent.parent
        check_no_links(folder)
    elif run.run_name is not None:
        check_no_links(Path(run.output_dir) / run.run_name, "runner.run_name")


def _check_resume(config: RLCoreConfig, plan: PlacementPlan) -> None:
    checkpoint = checkpoint_to_resume(config, quiet=True)  # the run says what it skips
    if checkpoint is None:
        return
    driver = json.loads((checkpoint / DRIVER_FILE).read_text())
    saved = driver["world_sizes"]
    placed = {name: plan.world_size(name) for name in saved if name in plan.components}
    check_resumable(driver, config, checkpoint, placed)
    if isinstance(config, EmbodiedConfig) and config.env.checkpoint_state == "pickle":
        check_pickled_envs(checkpoint / "env", list(range(plan.world_size("env"))))
