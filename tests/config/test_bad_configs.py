"""Every bad config is refused before anything starts, with one line naming the key and the fix."""

import pytest

from rlcore.config import ConfigError, load_config
from rlcore.placement import plan_for_config

CARTPOLE = "embodied/cartpole_ppo"
ARITH = "reasoning/tiny_arith_ppo"
RC = "algorithm.rollout_correction"
APART = [
    "cluster.devices_per_node=2",
    "cluster.component_placement={actor:0,critic:1,rollout:1,reward:1}",
]
GDPO = [
    "algorithm.adv_type=gdpo",
    "algorithm.group_size=2",
    "algorithm.gdpo_reward_keys=[correct,format]",
]

# (config, overrides, the key the message must name, a fragment of the fix it must give)
# fmt: skip below: a table, one bad config per line (or two), its columns aligned; the formatter
# would spread each row over six lines
BAD = [
    # unknown and misspelled keys
    (CARTPOLE, ["algorithm.clip_ratio_hi=0.3"], "algorithm.clip_ratio_hi",
     "did you mean 'algorithm.clip_ratio_high'"),
    (CARTPOLE, ["+trainer.total_epochs=3"], "trainer.total_epochs",
     "verl's key has no rlcore counterpart"),
    (CARTPOLE, ["env.idd=CartPole-v1"], "env.idd", "did you mean 'env.id'"),
    (ARITH, ["algorithm.clip_coef=0.1"], "algorithm.clip_coef",
     "rlcore calls it 'algorithm.clip_ratio_low'"),
    (ARITH, ["actor.grup_name=A"], "actor.grup_name", "did you mean 'actor.group_name'"),
    (ARITH, ["actor_rollout_ref.actor.ppo_mini_batchsize=8"],
     "actor_rollout_ref.actor.ppo_mini_batchsize",
     "did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'"),
    (ARITH, ["actor_rollout_ref.rollout.gpu_memory_utilization=0.5"],
     "rollout.gpu_memory_utilization", "only an sglang engine"),
    # verl and RLinf spellings with wrong values: named by the spelling, or by the rlcore key
    (ARITH, ["algorithm.lam=1.5"], "algorithm.gae_lambda", "1.5 is out of range"),
    (ARITH, ["algorithm.adv_estimator=grpoo"], "algorithm.adv_type", "did you mean 'grpo'"),
    (ARITH, ["actor_rollout_ref.rollout.n=0"], "algorithm.group_size", "must be >= 1"),
    (ARITH, ["trainer.logger=[console,mlflow]"], "trainer.logger", "mlflow is not a logger"),
    (ARITH, ["trainer.n_gpus_per_node=0"], "cluster.devices_per_node", "must be >= 1"),
    (ARITH, ["actor_rollout_ref.rollout.tensor_model_parallel_size=4"],
     "rollout.tensor_parallel_size", "set it to 1"),
    (
        ARITH,
        ["actor_rollout_ref.rollout.name=vllm"],
        "actor_rollout_ref.rollout.name",
        "'vllm'; the rollout engines here are hf and sglang (rollout.backend)",
    ),
    (ARITH, ["~actor_rollout_ref.rollout.n"], "actor_rollout_ref.rollout.n",
     "is algorithm.group_size here; delete that"),
    (CARTPOLE, ["algorithm.logprob_forward_micro_batch_size=0"],
     "actor.log_prob_micro_batch_size", "must be >= 1"),
    (CARTPOLE, ["algorithm.rollout_micro_batch_size=-2"], "rollout.micro_batch_size",
     "must be >= 1"),
    # components: group names and training backends
    (ARITH, ["actor.group_name=G", "critic.group_name=G"], "critic.group_name",
     "already names the actor group"),
    (ARITH, ["rollout.group_name=my group"], "rollout.group_name", "letters, digits"),
    (ARITH, ["critic.training_backend=megatron"], "critic.training_backend",
     "runs on GPUs only"),
    (CARTPOLE, ["actor.training_backend=megatron"], "actor.training_backend",
     "embodied policies are MLPs and CNNs: use torch or fsdp2"),
    (ARITH, ["actor.megatron.tensor_parallel_size=2"], "actor.megatron",
     "set actor.training_backend=megatron, or remove it"),
    (ARITH, ["actor.training_backend=megatron", "actor.model.lora.rank=8"],
     "actor.model.lora.rank", "LoRA adapters under Megatron is not built yet"),
    (ARITH, ["critic.training_backend=megatron", "actor.model.use_remove_padding=true"],
     "actor.model.use_remove_padding", "packed sequences"),
    (ARITH, ["actor.training_backend=megatron", "critic.training_backend=megatron",
             "critic.megatron.tensor_parallel_size=2"], "critic.megatron",
     "give both the same sizes"),
    (ARITH, ["actor.training_backend=megatron", "critic.training_backend=megatron",
             "actor.megatron.pipeline_parallel_size=2"], "critic.megatron",
     "differ from the actor's"),
    (ARITH, ["actor.megatron.pipeline_parallel_size=0"], "actor.megatron.pipeline_parallel_size",
     "must be >= 1"),
    (ARITH, ["actor.model.share_group_prompts=true"], "actor.model.share_group_prompts",
     "algorithm.group_size is 1"),
    (ARITH, ["actor.model.share_group_prompts=true", "algorithm.group_size=4",
             "actor.model.use_remove_padding=true"], "actor.model.share_group_prompts",
     "pick one"),
    (ARITH, ["actor.model.share_group_prompts=true", "algorithm.group_size=4",
             "actor.model.gradient_checkpointing=true"], "actor.model.share_group_prompts",
     "keeps no keys and values"),
    (ARITH, ["actor.model.share_group_prompts=true", "algorithm.group_size=4",
             "actor.training_backend=megatron"], "actor.model.share_group_prompts",
     "not built yet"),
    (ARITH, ["actor.model.use_fused_kernels=true", "actor.training_backend=megatron"],
     "actor.model.use_fused_kernels", "use training_backend torch or fsdp2 for it"),
    (ARITH, ["actor.model.use_fused_kernels=true", "actor.model.lora.rank=4",
             "actor.model.lora.target_modules=[q_proj,lm_head]"], "actor.model.use_fused_kernels",
     "remove lm_head from the targets"),
    (ARITH, ["actor_rollout_ref.model.fused_kernel_options.impl_backend=triton"],
     "actor_rollout_ref.model.fused_kernel_options.impl_backend", "no triton kernel; give torch"),
    (CARTPOLE, ["actor.training_backend=deepspeed"], "actor.training_backend",
     "not one of torch, fsdp2, megatron"),
    (CARTPOLE, ["data.train_batch_size=8"], "data", "belongs to mode reasoning"),
    # mistyped values
    (CARTPOLE, ["algorithm.gamma=abc"], "algorithm.gamma", "expected a number, got 'abc'"),
    (CARTPOLE, ["actor.ppo_mini_batch_size=2.5"], "actor.ppo_mini_batch_size",
     "expected an integer, got 2.5"),
    (CARTPOLE, ["actor.ppo_epochs=true"], "actor.ppo_epochs", "expected an integer, got True"),
    (CARTPOLE, ["algorithm.normalize_advantages=yes"], "algorithm.normalize_advantages",
     "expected true or false"),
    (CARTPOLE, ["algorithm.loss_type=actor_critc"], "algorithm.loss_type",
     "did you mean 'actor_critic'"),
    (ARITH, ["algorithm.kl_ctrl.type=adaptiv"], "algorithm.kl_ctrl.type", "'adaptive'"),
    (CARTPOLE, ["algorithm=3"], "algorithm", "expected a section of keys"),
    (CARTPOLE, ["algorithm.clip_ratio_c=high"], "algorithm.clip_ratio_c", "a number or null"),
    (CARTPOLE, ["mode=embodyed"], "mode", "must be one of embodied, reasoning"),
    (CARTPOLE, ["~env.id"], "env.id", "missing required key"),
    # cross-field checks
    (CARTPOLE, ["algorithm.clip_ratio_c=0.5"], "algorithm.clip_ratio_c", "must be > 1"),
    (CARTPOLE, ["algorithm.huber_delta=0"], "algorithm.huber_delta", "must be > 0"),
    (CARTPOLE, ["algorithm.gamma=1.5"], "algorithm.gamma", "must be in [0, 1]"),
    (CARTPOLE, ["algorithm.clip_ratio_low=1.0"], "algorithm.clip_ratio_low", "[0, 1)"),
    (CARTPOLE, ["actor.ppo_mini_batch_size=300"], "actor.ppo_mini_batch_size",
     "does not divide the batch of 512"),
    (CARTPOLE, ["actor.ppo_micro_batch_size=100"], "actor.ppo_micro_batch_size",
     "pick a divisor of 512"),
    (ARITH, ["cluster.devices_per_node=2", "cluster.component_placement={actor:all,critic:all,"
             "ref:all,rollout:all,reward:all}", "actor.ppo_micro_batch_size=5"],
     "actor.ppo_micro_batch_size", "each of the 2 actor ranks holds"),
    (CARTPOLE, ["cluster.devices_per_node=2", "cluster.component_placement={actor:all,"
                "rollout:all,env:0}"], "cluster.component_placement",
     "env has 1 rank(s) and rollout 2"),
    (CARTPOLE, ["actor.model.add_value_head=false"], "actor.model.add_value_head",
     "leave add_value_head out: the policy always has one"),
    (ARITH, ["actor.model.add_value_head=true"], "actor.model.add_value_head",
     "the reasoning policy has no value head"),
    (CARTPOLE, ["algorithm.loss_type=actor"], "algorithm.loss_type",
     "a policy without a value head is not built"),
    (CARTPOLE, ["algorithm.adv_type=gea"], "algorithm.adv_type", "did you mean 'gae'"),
    (CARTPOLE, ["algorithm.policy_loss=pop"], "algorithm.policy_loss", "did you mean 'ppo'"),
    (CARTPOLE, ["env.num_envs=0"], "env.num_envs", "must be >= 1"),
    ("embodied/maniskill_pickcube_ppo", ["env.kwargs={obs_mode:rgb}"], "env.vector_mode",
     "hang in SAPIEN's renderer in forked subprocesses; use sync or auto"),
    (CARTPOLE, ["algorithm.group_size=4", "algorithm.adv_type=gae", "algorithm.value_coef=0"],
     "algorithm.adv_type", "gae does not fit embodied groups"),
    (CARTPOLE, ["algorithm.group_size=3", "algorithm.adv_type=grpo", "algorithm.value_coef=0"],
     "env.num_envs", "64 envs do not make whole groups of algorithm.group_size=3"),
    (CARTPOLE, ["algorithm.group_size=4", "algorithm.adv_type=grpo", "algorithm.value_coef=0",
                "algorithm.bootstrap_type=always"],
     "algorithm.bootstrap_type", "no value to bootstrap from; leave bootstrap_type out"),
    (ARITH, ["algorithm.bootstrap_type=always"], "algorithm.bootstrap_type", "embodied"),
    (ARITH, ["algorithm.loss_type=actor_critic"], "algorithm.loss_type",
     "cannot share one backward pass (loss_type actor): leave loss_type out"),
    (ARITH, ["critic.use_critic_model=false"], "critic.use_critic_model",
     "gae reads values from a critic; leave use_critic_model out"),
    (ARITH, ["algorithm.adv_type=grpo", "critic.use_critic_model=false"], "algorithm.group_size",
     "set group_size >= 2"),
    (ARITH, ["algorithm.adv_type=grpo", "algorithm.group_size=4", "critic.use_critic_model=true"],
     "critic.use_critic_model", "grpo never reads values"),
    (ARITH, ["algorithm.use_kl_in_reward=true", "algorithm.use_kl_loss=true"],
     "algorithm.use_kl_in_reward", "keep one"),
    (ARITH, ["algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=full"],
     "algorithm.kl_penalty", "needs the whole vocabulary"),
    (ARITH, ["data.train_batch_size=24"], "actor.ppo_mini_batch_size",
     "does not divide the batch of 24"),
    (ARITH, ["critic.ppo_micro_batch_size=5"], "critic.ppo_micro_batch_size",
     "pick a divisor of 64"),
    (ARITH, ["rollout.backend=sglang"], "rollout.backend", "needs sglang==0.5.21"),
    (ARITH, ["rollout.gpu_memory_utilization=0.5"], "rollout.gpu_memory_utilization",
     "only an sglang engine"),
    (ARITH, ["reward.kind=custom"], "reward.rules.custom_fn", "name the function"),
    (ARITH, ["reward.rules.custom_fn=a.py:f"], "reward.rules.custom_fn", "set reward.kind=custom"),
    (ARITH, ["reward.model.backend=fsdp2"], "reward.model.backend",
     "only kind model (a reward model) is sharded by it"),
    (CARTPOLE, ["runner.run_name=../x"], "runner.run_name", "must be one folder name"),
    (ARITH, ["runner.run_name=a/b"], "runner.run_name", "no '/'"),
    (CARTPOLE, ["runner.run_name=" + "r" * 300], "runner.run_name",
     "is 300 bytes long; a folder name has at most 255"),
    (CARTPOLE, ["runner.seed=99999999999999999999"], "runner.seed", "[0, 2147483647]"),
    (CARTPOLE, ["cluster.network_interface=eth0"], "cluster.network_interface",
     "a local run binds Ray, the torch.distributed stores, gloo and NCCL to 127.0.0.1"),
    (CARTPOLE, ["runner.resume=auto"], "runner.resume", "needs a fixed runner.run_name"),
    (CARTPOLE, ["runner.resume=auto", "runner.run_name=a", "runner.resume_dir=/x"],
     "runner.resume_dir", "keep one"),
    (ARITH, ["runner.keep_checkpoints=0"], "runner.keep_checkpoints", "must be >= 1, or null"),
    (ARITH, ["actor.model.tiny.num_heads=3"], "actor.model.tiny.num_heads",
     "does not divide hidden_size 128"),
    (ARITH, ["rollout.n=4"], "rollout.n", "rlcore calls it 'algorithm.group_size'"),
    (ARITH, ["algorithm.kl_ctrl.target_kl=0"], "algorithm.kl_ctrl.target_kl", "must be > 0"),
    # out of the declared range: the key, the value and the range
    (CARTPOLE, ["runner.total_env_steps=-5"], "runner.total_env_steps",
     "-5 is out of range: it must be >= 1"),
    (ARITH, ["runner.total_iterations=-1"], "runner.total_iterations", "must be >= 1"),
    (ARITH, ["rollout.temperature=0"], "rollout.temperature",
     "0.0 is out of range: it must be > 0"),
    (ARITH, ["rollout.top_p=2"], "rollout.top_p", "must be in (0, 1]"),
    (ARITH, ["rollout.top_k=-1"], "rollout.top_k", "must be >= 0"),
    (CARTPOLE, ["actor.optim.lr=-1"], "actor.optim.lr", "must be > 0"),
    (ARITH, ["critic.optim.lr=0"], "critic.optim.lr", "must be > 0"),
    (ARITH, ["data.max_response_length=0"], "data.max_response_length", "must be >= 1"),
    (CARTPOLE, ["actor.optim.max_grad_norm=-1"], "actor.optim.max_grad_norm",
     "must be > 0, or null"),
    (ARITH, ["reward.rules.timeout_s=-1"], "reward.rules.timeout_s", "must be > 0"),
    (CARTPOLE, ["actor.model.hidden_sizes=[64,0]"], "actor.model.hidden_sizes",
     "every item must be >= 1"),
    (CARTPOLE, ["actor.model.hidden_sizes=[]"], "actor.model.hidden_sizes", "at least one layer"),
    (CARTPOLE, ["runner.total_env_steps=100"], "runner.total_env_steps",
     "100 is less than one iteration (runner.rollout_steps x env.num_envs = 512 steps)"),
    (CARTPOLE, ["algorithm.entropy_bonus=nan"], "algorithm.entropy_bonus",
     "nan is out of range: it must be >= 0"),
    (CARTPOLE, ["env.solved_threshold=inf"], "env.solved_threshold", "must be a finite number"),
    (ARITH, ["data.synthetic.digits=7"], "data.synthetic.digits", "must be in [1, 6]"),
    (CARTPOLE, ["runner.seed=-1"], "runner.seed", "must be in [0, 2147483647]"),
    (ARITH, ["data.val_max_samples=0"], "data.val_max_samples", "must be >= 1, or null"),
    (ARITH, ["algorithm.use_kl_loss=true", "algorithm.kl_loss_type=full"],
     "algorithm.kl_loss_type", "use kl, abs, mse or low_var_kl"),
    # set in a mode that does not read it
    (CARTPOLE, ["algorithm.use_kl_loss=true"], "algorithm.use_kl_loss",
     "not read in embodied mode (only in reasoning mode); remove it or leave it at false"),
    (CARTPOLE, ["algorithm.kl_loss_coef=5.0"], "algorithm.kl_loss_coef", "not read in embodied"),
    (CARTPOLE, ["algorithm.kl_ctrl.type=adaptive"], "algorithm.kl_ctrl",
     "leave it at its defaults"),
    (CARTPOLE, ["algorithm.norm_adv_by_std=false"], "algorithm.norm_adv_by_std",
     "not read in embodied"),
    (ARITH, ["algorithm.value_coef=1.0"], "algorithm.value_coef", "not read in reasoning mode"),
    (CARTPOLE, ["algorithm.adv_type=grpo"], "algorithm.adv_type", "cannot run in embodied mode"),
    (CARTPOLE, ["algorithm.loss_agg_func=seq-mean-token-mean"], "algorithm.loss_agg_func",
     "leave it at token-mean"),
    (CARTPOLE, ["algorithm.gdpo_reward_keys=[correct]"], "algorithm.gdpo_reward_keys",
     "not read in embodied"),
    # FSDP2's options
    (ARITH, ["actor.fsdp.param_dtype=bfloat16"], "actor.fsdp",
     "set actor.training_backend=fsdp2, or remove it"),
    (CARTPOLE, ["actor.fsdp.offload=true"], "actor.fsdp", "training_backend is torch"),
    (ARITH, ["critic.training_backend=fsdp2", "critic.fsdp.reduce_dtype=bfloat16"],
     "critic.fsdp.reduce_dtype", "set critic.fsdp.param_dtype too"),
    (ARITH, ["actor.training_backend=fsdp2", "actor.fsdp.offload=true", "cluster.device=cpu"],
     "actor.fsdp.offload", "nothing to offload"),
    (ARITH, ["sync.bucket_mb=0"], "sync.bucket_mb", "must be > 0"),
    (ARITH, ["actor.model.lora.rank=4", "actor.training_backend=fsdp2"],
     "actor.model.lora.rank", "LoRA under FSDP2 is not built yet"),
    (ARITH, ["actor.model.lora.rank=4", "actor.model.lora.target_modules=[]"],
     "actor.model.lora.target_modules", "LoRA would train nothing"),
    (ARITH, ["actor.max_tokens_per_micro_batch=256"], "actor.max_tokens_per_micro_batch",
     "set actor.ppo_micro_batch_size=null, or remove the budget"),
    (ARITH, ["cluster.device=cuda", "cluster.devices_per_node=4", "cluster.component_placement="
             "{actor:0-1,critic:0-1,ref:0-1,rollout:2-3:0,reward:0-1}"],
     "cluster.component_placement", "rollout process 0 spans GPUs [2, 3], but a rollout process "
     "uses one GPU (only an sglang rollout engine and the Megatron backend span several)"),
    # GDPO's reward components
    (ARITH, [*GDPO[:2]], "algorithm.gdpo_reward_keys", "name them, e.g. [correct, format]"),
    (ARITH, ["algorithm.gdpo_reward_keys=[correct]"], "algorithm.gdpo_reward_keys",
     "only gdpo reads it; remove it, or set algorithm.adv_type=gdpo"),
    (ARITH, ["algorithm.gdpo_reward_weights=[1.0]"], "algorithm.gdpo_reward_weights",
     "only gdpo reads it"),
    (ARITH, [*GDPO[:2], "algorithm.gdpo_reward_keys=[correct,length]"],
     "algorithm.gdpo_reward_keys", "length not given by reward.kind auto, which gives score, "
     "correct, format (overlong_penalty with reward.overlong_buffer.enable)"),
    (ARITH, [*GDPO[:2], "algorithm.gdpo_reward_keys=[correct,correct]"],
     "algorithm.gdpo_reward_keys", "correct named twice"),
    (ARITH, [*GDPO, "algorithm.gdpo_reward_weights=[1.0]"], "algorithm.gdpo_reward_weights",
     "1 weights for 2 gdpo_reward_keys"),
    (ARITH, [*GDPO, "reward.overlong_buffer.enable=true", "reward.overlong_buffer.len=2"],
     "reward.overlong_buffer.enable", "add overlong_penalty to gdpo_reward_keys"),
    (ARITH, [*GDPO, "algorithm.use_kl_in_reward=true"], "algorithm.use_kl_in_reward",
     "use algorithm.use_kl_loss=true"),
    # the rollout correction (verl's keys)
    (ARITH, [f"{RC}.rollout_is=tok"], f"{RC}.rollout_is", "did you mean 'token'"),
    (ARITH, [f"{RC}.rollout_is_threshold=two"], f"{RC}.rollout_is_threshold",
     "not a number"),
    (ARITH, [f"{RC}.rollout_is_threshold=3.0_1.0"], f"{RC}.rollout_is_threshold",
     "lower bound above its upper bound"),
    (ARITH, [f"{RC}.rollout_rs=token_k4", f"{RC}.rollout_rs_threshold=2"], f"{RC}.rollout_rs",
     "not one of token_k1"),
    (ARITH, [f"{RC}.rollout_rs=token_k1"], f"{RC}.rollout_rs_threshold", "needs a threshold"),
    (ARITH, [f"{RC}.rollout_rs_threshold=2"], f"{RC}.rollout_rs_threshold",
     "name the rejection options"),
    (ARITH, [f"{RC}.bypass_mode=true", f"{RC}.rollout_is=token"], f"{RC}.bypass_mode",
     "use bypass_mode=false"),
    (ARITH, [f"{RC}.loss_type=reinforce"], f"{RC}.loss_type", "is not built"),
    (ARITH, [f"{RC}.bypass_mode=true", "algorithm.adv_type=optimal_token_baseline",
             "algorithm.group_size=2"], f"{RC}.bypass_mode", "the very pass bypass mode skips"),
    (CARTPOLE, [f"{RC}.rollout_is=sequence"], f"{RC}.rollout_is", "no sequence"),
    (CARTPOLE, [f"{RC}.rollout_rs=token_k1", f"{RC}.rollout_rs_threshold=2"], f"{RC}.rollout_rs",
     "built for reasoning only"),
    # the reward kinds
    (ARITH, ["+reward.sources={my/data: modle}"], "reward.sources", "did you mean 'model'"),
    (ARITH, ["+reward.sources={my/data: remote}"], "reward.remote.url",
     "reward.sources names remote: give the remote service's address"),
    (ARITH, ["reward.kind=model"], "reward.model.path", "give the reward model's folder"),
    (ARITH, ["reward.remote.url=http://127.0.0.1:1/x"], "reward.remote.url",
     "set reward.kind=remote"),
    (ARITH, ["reward.remote.on_error=zero"], "reward.remote.on_error", "set reward.kind=remote"),
    (ARITH, ["reward.remote.retries=0"], "reward.remote.retries", "set reward.kind=remote"),
    # the earlier flat keys still load, each said in one line
    (ARITH, ["reward.kind=model", "reward.model_path=null"], "reward.model.path",
     "give the reward model's folder"),
    # asynchronous runs: the rollout apart from the actor; what is not built, refused
    (ARITH, ["runner.max_staleness=1"], "runner.max_staleness", "place the rollout apart"),
    (ARITH, ["runner.max_staleness=1", *APART, "cluster.fuse_collocated=true",
             "cluster.component_placement={actor:0,rollout:0,critic:1,reward:1}"],
     "runner.max_staleness", "shares a process with the actor (actor, rollout)"),
    (ARITH, ["runner.max_staleness=1", *APART, "algorithm.filter_groups.enable=true",
             "algorithm.group_size=2", "algorithm.adv_type=grpo"], "runner.max_staleness",
     "DAPO's resampling learns how many more prompts a batch needs only from its scores"),
    (CARTPOLE, ["runner.max_staleness=1"], "runner.max_staleness",
     "cannot collect while the actor trains; place the rollout apart"),
    (ARITH, ["actor.entropy_from_logits_chunk_size=512"], "actor.entropy_from_logits_chunk_size",
     "set actor.entropy_from_logits_with_chunking=true"),
    # partial rollouts: asynchronous, hf, single-turn
    (ARITH, ["rollout.partial_rollout=true"], "rollout.partial_rollout",
     "a synchronous run updates no weights during a generation"),
    (ARITH, ["rollout.partial_rollout_tokens=4"], "rollout.partial_rollout_tokens",
     "set rollout.partial_rollout=true"),
    ("reasoning/tiny_calc_tools_grpo", ["rollout.partial_rollout=true", "runner.max_staleness=1",
     *APART], "rollout.partial_rollout", "multi-turn rollouts"),
]  # fmt: skip


@pytest.mark.parametrize(("config", "overrides", "key", "fix"), BAD, ids=lambda p: str(p))
def test_bad_config_gives_one_line_naming_the_key(config, overrides, key, fix):
    with pytest.raises(ConfigError) as caught:
        plan_for_config(load_config(config, overrides))  # all the checks before a start
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{key}:") or f" {key} " in message, message
    assert fix in message


def test_a_given_model_turns_the_tiny_models_warm_up_off_and_says_so(capsys):
    # the seed's command on the default job (whose YAML warms the tiny model up) names a model
    config = load_config(ARITH, ["actor.model.path=/models/qwen"])
    assert config.warmup.steps == 0
    assert capsys.readouterr().err.splitlines() == [
        "rlcore: warmup.steps: 600 set to 0: the supervised warm-up trains the tiny model only, "
        "and actor.model.path names a model (/models/qwen)"
    ]
    assert load_config(ARITH, []).warmup.steps == 600  # the tiny model keeps its warm-up
    # the tool task's warm-up problems go with its steps
    tools = load_config("reasoning/tiny_calc_tools_grpo", ["actor.model.path=/models/qwen"])
    assert (tools.warmup.steps, tools.warmup.examples) == (0, None)
    assert "(and warmup.examples to null)" in capsys.readouterr().err


def test_one_data_file_may_be_given_as_verl_writes_it():
    config = load_config(ARITH, ["data.train_files=/d/train.parquet", "data.val_files=[/d/a,/d/b]"])
    assert config.data.train_files == ("/d/train.parquet",)  # a list of one
    assert config.data.val_files == ("/d/a", "/d/b")
    with pytest.raises(ConfigError, match=r"data.train_files: item 0: expected a string, got 3"):
        load_config(ARITH, ["data.train_files=[3]"])


def test_a_run_name_with_a_nul_character_is_refused():
    # (an override cannot carry one: Hydra refuses it first; a YAML string or a program can)
    import dataclasses

    from rlcore.config.checks.run import check_runner

    config = load_config(CARTPOLE, [])
    named = dataclasses.replace(config, runner=dataclasses.replace(config.runner, run_name="a\0b"))
    assert check_runner(named) == [
        "runner.run_name: 'a<NUL>b' holds a NUL character, which no folder name can; remove it"
    ]


def test_every_problem_is_reported_at_once_one_per_line():
    with pytest.raises(ConfigError) as caught:
        load_config(CARTPOLE, ["algorithm.gama=0.9", "env.num_envs=many", "runner.steps=3"])
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("algorithm.gama: unknown key; did you mean 'algorithm.gamma'")
    assert any(line.startswith("env.num_envs: expected an integer") for line in lines)
    assert any(line.startswith("runner.steps: unknown key") for line in lines)


def test_unknown_config_name_suggests_a_known_one():
    with pytest.raises(ConfigError, match="did you mean 'embodied/cartpole_ppo'"):
        load_config("embodied/cartpol")


def test_missing_yaml_file_is_named():
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such config file"):
        load_config("nope.yaml")


def test_sweeps_are_refused():
    with pytest.raises(ConfigError, match="sweeps are not supported"):
        load_config(CARTPOLE, ["algorithm.gamma=0.9,0.99"])


def test_unparsable_override_is_refused():
    with pytest.raises(ConfigError, match="cannot parse override"):
        load_config(CARTPOLE, ["algorithm.gamma=]"])


def test_yaml_file_errors_name_the_key(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("mode: embodied\nenv: {id: CartPole-v1}\nactor:\n  ppo_mini_batch_sze: 64\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    lines = str(caught.value).splitlines()
    assert (
        "actor.ppo_mini_batch_sze: unknown key; did you mean 'actor.ppo_mini_batch_size'?" in lines
    )
    assert any(line.startswith("actor.ppo_mini_batch_size: missing required key") for line in lines)


def test_subfolder_config_without_global_package_header_says_how_to_fix(tmp_path):
    (tmp_path / "embodied").mkdir()
    (tmp_path / "embodied" / "x.yaml").write_text("mode: embodied\n")
    with pytest.raises(ConfigError, match="'# @package _global_'"):
        load_config("embodied/x", config_dir=tmp_path)
