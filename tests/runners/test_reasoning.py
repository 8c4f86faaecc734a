"""The reasoning runner end to end on the tiny model: in one process, resumed, and spread over
Ray processes; bad model paths and data fail before anything starts."""

import json
import re
import time

import pytest
import torch

from rlcore.cli import run_entry_point
from rlcore.config.errors import ConfigError
from rlcore.data import DataError
from rlcore.data.sampler import prompt_batch
from rlcore.placement import plan_for_config
from rlcore.runners.baselines import greedy_baselines
from rlcore.runners.preflight import preflight
from rlcore.runners.supervisor import build_runner
from rlcore.scheduler import WorkerError
from tests.lm_fixtures import (
    TINY,
    assert_resumed_like_unbroken,
    once,
    resumed_at_two,
    tiny_config,
)

# every Ray run of this module joins one local Ray (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("local_ray")


def length_reward(tmp_path):
    """A barely trained model is never right; a reward on the text's length gives a signal."""
    (tmp_path / "length.py").write_text(
        "def score(response, answer):\n    return len(response) % 3\n"
    )
    return (
        "reward.kind=custom",
        f"reward.rules.custom_fn={tmp_path}/length.py:score",
        "reward.rules.num_processes=1",
    )


def run(config):
    return build_runner(config, plan_for_config(config)).run()


def test_a_short_run_writes_and_prints_its_summary(tiny_lm, tmp_path, capsys):
    _, dirs = tiny_lm
    cache = dirs.actor.parent
    code = run_entry_point(
        "reasoning/tiny_arith_ppo",
        [
            *TINY,
            f"warmup.cache_dir={cache}",
            f"runner.output_dir={tmp_path}",
            "runner.run_name=r",
            "runner.val_n=3",
            "runner.log_val_generations=2",
            "logger.console=true",
        ],
    )
    assert code == 0
    out = capsys.readouterr()
    summary = json.loads(out.out.strip().splitlines()[-1])
    assert summary == json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["iterations"] == 2 and summary["wall_s"] > 0
    for key in ("val_accuracy_before", "val_accuracy_after"):
        assert 0.0 <= summary[key] <= 1.0
    # validation with 3 samples per prompt: its metrics, and the generations of 2 prompts
    step0 = next(line for line in out.err.splitlines() if line.startswith("step 0:"))
    metrics = dict(item.split("=") for item in step0.split(": ", 1)[1].split())
    assert {"val/mean@3", "val/pass@1", "val/pass@3", "val/reward_mean@3"} <= set(metrics)
    assert float(metrics["val/pass@1"]) <= float(metrics["val/pass@3"])
    lines = (tmp_path / "r/validation/iter_000000.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert len(first["samples"]) == 3 and first["prompt"] and first["answer"]
    assert set(first["greedy"]) == {"response", "score", "correct"}
    assert (tmp_path / "r/validation/iter_000002.jsonl").is_file()  # the last validation


def test_grpo_runs_without_a_critic_or_reference(tiny_lm, tmp_path):
    _, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        tmp_path,
        "algorithm.adv_type=grpo",
        "algorithm.group_size=4",
        "actor.ppo_micro_batch_size=4",
    )
    runner = build_runner(config, plan_for_config(config))
    assert set(runner.plan.components) == {"actor", "rollout", "reward"}
    # A prompt drawn twice in one batch (across an epoch boundary) forms two groups.
    batch = prompt_batch([3, 3], runner.train_set, 4, runner.tokenizer.pad_token_id)
    assert batch["index"].tolist() == [0] * 4 + [1] * 4
    assert runner.run()["iterations"] == 2


def test_the_remax_baseline_is_the_score_of_each_prompts_greedy_answer(tiny_lm, tmp_path):
    _, dirs = tiny_lm
    (tmp_path / "chars.py").write_text("def score(response, answer):\n    return len(response)\n")
    config = tiny_config(
        dirs.actor.parent,
        tmp_path,
        "algorithm.adv_type=remax",
        "algorithm.group_size=3",
        "reward.kind=custom",
        f"reward.rules.custom_fn={tmp_path}/chars.py:score",
    )
    runner = build_runner(config, plan_for_config(config))
    try:
        runner.sync()
        pad, rows = runner.tokenizer.pad_token_id, [0, 5, 2]
        batch = prompt_batch(rows, runner.train_set, 3, pad)
        batch.update(runner.rollout.generate(batch, runner.version))
        got = greedy_baselines(batch, 3, runner.whole_shards, runner._greedy, runner.reward.score)
        alone = []  # each prompt answered greedily on its own, and scored
        for row in rows:
            prompt = prompt_batch([row], runner.train_set, 1, pad)
            prompt.update(runner.rollout.generate(prompt, runner.version, greedy=True))
            alone.append(runner.reward.score(prompt)["scores"].item())
        assert got.tolist() == [score for score in alone for _ in range(3)], alone
    finally:
        runner.close()


@pytest.mark.parametrize(
    "choice",
    [
        "algorithm.policy_loss=gspo",
        "algorithm.policy_loss=gpg",
        "algorithm.adv_type=grpo_passk",
        "algorithm.adv_type=opo",
        "algorithm.adv_type=gpg",
        "algorithm.adv_type=rloo_vectorized",
        "algorithm.adv_type=remax",
        "algorithm.adv_type=optimal_token_baseline",
        "algorithm.adv_type=tir_optimal_token_baseline",
        "algorithm.adv_type=gdpo algorithm.gdpo_reward_keys=[correct,format,overlong_penalty] "
        "algorithm.gdpo_reward_weights=[1.0,0.5,0.5] reward.overlong_buffer.enable=true "
        "reward.overlong_buffer.len=2",
        *(
            f"algorithm.policy_loss={name}"
            for name in (
                "vanilla",
                "clip_cov",
                "kl_cov",
                "cispo",
                "sapo",
                "geo_mean",
                "dppo_tv",
                "dppo_kl",
            )
        ),
        "algorithm.policy_loss=dro algorithm.policy_loss_options.dro_beta=0.1",
        # micro-batches by tokens (the critic's budget is the actor's)
        "actor.ppo_micro_batch_size=null actor.max_tokens_per_micro_batch=200",
        # a barely trained model is never right: DAPO's groups must differ in their scores
        "--config reasoning/tiny_arith_dapo data.train_batch_size=4 LENGTH_REWARD "
        "algorithm.filter_groups.metric=score",
    ],
)
def test_each_added_estimator_and_policy_loss_trains_end_to_end(tiny_lm, tmp_path, capsys, choice):
    _, dirs = tiny_lm
    name, overrides = "reasoning/tiny_arith_ppo", choice.split()
    if overrides[0] == "--config":  # a shipped recipe, run as a user would
        name, overrides = overrides[1], overrides[2:]
    if "LENGTH_REWARD" in overrides:
        overrides.remove("LENGTH_REWARD")
        overrides += length_reward(tmp_path)
    args = once(
        *TINY,
        f"warmup.cache_dir={dirs.actor.parent}",
        f"runner.output_dir={tmp_path}",
        "runner.checkpoint_every=0",
        "algorithm.adv_type=grpo",
        "algorithm.group_size=4",
        *overrides,
    )
    assert run_entry_point(name, args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["iterations"] == 2 and summary["skipped_steps"] == {"actor": 0}


# Every reasoning layout the suite runs: (slots, placement); ref is placed by the resume test.
LAYOUTS = {
    "one-process": (1, None),
    "rollout-apart": (2, "{actor:0,critic:0,ref:0,rollout:1,reward:1}"),
    "disaggregated": (3, "{actor:0,critic:1,ref:1,rollout:2,reward:2}"),
    "data-parallel": (2, "{actor:all,critic:all,ref:all,rollout:all,reward:all}"),
}


def placed(layout):
    slots, placement = LAYOUTS[layout]
    if placement is None:
        return []
    return [f"cluster.devices_per_node={slots}", f"cluster.component_placement={placement}"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_dry_run_accepts_every_layout_the_suite_runs(tiny_lm, tmp_path, capsys, layout):
    _, dirs = tiny_lm
    args = [
        *TINY,
        f"warmup.cache_dir={dirs.actor.parent}",
        "algorithm.use_kl_in_reward=true",
        *placed(layout),
        "runner.dry_run=true",
    ]
    assert run_entry_point("reasoning/tiny_arith_ppo", args) == 0
    assert "dry run: the config and placement are valid" in capsys.readouterr().out


# rollout-apart resumes after a killed rollout process (tests/runners/test_supervisor.py).
# The disaggregated and data-parallel cases also check what runs in those layouts (they were
# tests of their own, each starting its own processes): components in their own processes, the
# rollout refusing weights it was not synced and syncing the actor's; DDP's ranks in step.
@pytest.mark.parametrize("layout", ["one-process", "disaggregated", "data-parallel"])
def test_a_resumed_run_ends_with_the_same_weights_as_an_unbroken_one(tiny_lm, tmp_path, layout):
    _, dirs = tiny_lm
    common = (
        f"runner.output_dir={tmp_path}",
        "runner.checkpoint_every=1",
        "algorithm.use_kl_in_reward=true",
        "algorithm.kl_ctrl.type=adaptive",
        *length_reward(tmp_path),
        *placed(layout),
    )
    cache = dirs.actor.parent
    config = tiny_config(
        cache, tmp_path, *common, "runner.total_iterations=3", "runner.run_name=full"
    )
    plan = plan_for_config(config)
    if layout == "disaggregated":
        assert len(plan.processes()) == 3  # rollout and reward share one; weights sync to it
    if layout == "data-parallel":
        assert plan.world_size("actor") == plan.world_size("rollout") == 2
    summary = build_runner(config, plan).run()
    assert summary["iterations"] == 3
    # a custom reward of bare numbers gives no verdict: no accuracy, the mean of its scores
    assert "val_accuracy_after" not in summary
    assert 0.0 <= summary["val_reward_mean_after"] <= 2.0
    # Stopped after iteration 2: a run folder holding only the iteration-2 checkpoint.
    runner = resumed_at_two(cache, tmp_path, *common)
    if layout == "disaggregated":
        the_rollout_holds_only_the_weights_it_was_synced(runner)
    runner.run()
    assert_resumed_like_unbroken(tmp_path)
    if layout == "data-parallel":  # DDP in step: both ranks' optimisers saw the same gradients
        saved = tmp_path / "full/checkpoints/iter_000003/actor"
        ranks = [torch.load(saved / f"trainer_rank{r}.pt")["optimizer"]["state"] for r in (0, 1)]
        assert ranks[0].keys() == ranks[1].keys() and ranks[0]
        for name, moments in ranks[0].items():
            for key in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(moments[key], ranks[1][name][key]), (name, key)


def the_rollout_holds_only_the_weights_it_was_synced(runner):
    """A resumed disaggregated run before it trains on: the actor (in its own process) holds the
    checkpoint's weights and the rollout (in another) the model folder's, which it refuses to
    generate with as the actor's; a sync gives it the actor's. Nothing here draws from the
    rollout's random stream, so the run goes on as it would have."""
    group, version = runner.components.group, runner.version
    held = group("rollout").call_rank(0, "weights")
    trained = group("actor").call_rank(0, "weights")
    assert any(not torch.equal(trained[k], held[k]) for k in trained)
    prompts = prompt_batch([0, 1, 2, 3], runner.train_set, 1, runner.tokenizer.pad_token_id)
    runner.sync()  # what the next iteration starts with (it then finds nothing to copy)
    assert all(
        torch.equal(trained[k], v) for k, v in group("rollout").call_rank(0, "weights").items()
    )
    with pytest.raises(
        WorkerError,
        match=f"StaleWeightsError: rollout rank 0 holds policy weights of version {version}, "
        f"but the driver expects version {version + 1}",
    ):
        runner.rollout.generate(prompts, version + 1)


@pytest.mark.parametrize("layout", ["data-parallel", "rollout-apart"])
def test_fsdp2_actor_and_critic_train_and_sync_whole_weights(tiny_lm, tmp_path, layout):
    """FSDP2 over 2 ranks: the rollout (fused with a rank, or apart) gets the whole trained
    weights, gathered from every actor rank."""
    _, dirs = tiny_lm
    placement = {
        "data-parallel": (2, "{actor:all,critic:all,rollout:all,reward:all}"),
        "rollout-apart": (3, "{actor:0-1,critic:0-1,rollout:2,reward:2}"),
    }[layout]
    config = tiny_config(
        dirs.actor.parent,
        tmp_path,
        f"cluster.devices_per_node={placement[0]}",
        f"cluster.component_placement={placement[1]}",
        "actor.training_backend=fsdp2",
        "critic.training_backend=fsdp2",
        "sync.bucket_mb=0.05",  # 52 KiB: the weights go in several buckets
        *length_reward(tmp_path),
    )
    runner = build_runner(config, plan_for_config(config))
    group = runner.components.group
    start = group("rollout").call_rank(0, "weights")
    runner.iterate(1)
    runner.sync()
    trained = group("actor").call_all("weights")  # a collective: every rank gathers
    assert all(torch.equal(trained[0][k], trained[1][k]) for k in trained[0])
    assert any(not torch.equal(trained[0][k], start[k]) for k in start)
    for rank in range(group("rollout").world_size):
        synced = group("rollout").call_rank(rank, "weights")
        assert all(torch.equal(trained[0][k], synced[k]) for k in synced)
    if layout == "rollout-apart":
        # Whole weights by IPC handles (the shared-GPU path; named shared memory on CPU
        # slots): both sharded ranks gather each bucket, and a rank on the rollout's node hands
        # it over. Another iteration first trains the actor past what the rollout holds.
        runner.iterate(2)
        trained = group("actor").call_all("weights")
        held = group("rollout").call_rank(0, "weights")
        assert any(not torch.equal(trained[0][k], held[k]) for k in held)
        report = runner.components.scheduler.sync_weights("actor", "rollout", method="ipc")
        assert report.method == "ipc"
        synced = group("rollout").call_rank(0, "weights")
        assert all(torch.equal(trained[0][k], synced[k]) for k in synced)
    assert runner.run()["iterations"] == 2


def test_fsdp2_in_one_process_with_mixed_precision_syncs_the_rollouts_own_copy(tiny_lm, tmp_path):
    """One process: FSDP2 on a group of one, parameters cast to bf16 for the passes. The rollout
    cannot share the module (its passes go through FSDP2's casts), so it keeps a copy, which
    each sync refreshes a bucket at a time. The reference computes in the passes' dtype: before
    any update it is the actor, so the KL to it is exactly 0 (3.9e-6 with a float32 reference)."""
    _, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        tmp_path,
        "actor.training_backend=fsdp2",
        "actor.fsdp.param_dtype=bfloat16",
        "algorithm.use_kl_loss=true",
        "sync.bucket_mb=0.05",
        *length_reward(tmp_path),
    )
    runner = build_runner(config, plan_for_config(config))
    try:
        start = {k: v.clone() for k, v in runner.rollout.weights().items()}
        assert runner.rollout.engine.model is not runner.actor.model
        assert {p.dtype for p in runner.ref.model.parameters()} == {torch.bfloat16}
        metrics = runner.iterate(1)
        assert metrics["kl/to_ref"] == 0.0
        runner.sync()
        trained, synced = runner.actor.weights(), runner.rollout.weights()
        assert {t.dtype for t in trained.values()} == {torch.float32}
        assert any(not torch.equal(trained[k], start[k]) for k in start)
        assert all(torch.equal(trained[k], synced[k]) for k in synced)
    finally:
        runner.close()


def test_a_fused_rollout_hands_over_its_log_probs_and_the_update_is_the_recomputed_ones(
    tiny_lm, tmp_path
):
    """One process, the rollout sampling with the actor's module: no old-log-prob pass, and the
    iteration ends where it does with the pass (actor.recompute_log_probs=true)."""
    _, dirs = tiny_lm
    ends = {}
    for recompute in (False, True):
        config = tiny_config(
            dirs.actor.parent,
            tmp_path,
            *length_reward(tmp_path),
            f"actor.recompute_log_probs={str(recompute).lower()}",
        )
        runner = build_runner(config, plan_for_config(config))
        try:
            assert runner.passes.reuse_log_probs is not recompute
            runner.sync()
            metrics = runner.iterate(1)
            assert ("time/logprob_s" in metrics) is recompute
            ends[recompute] = {k: v.clone() for k, v in runner.actor.weights().items()}
        finally:
            runner.close()
    assert all(torch.allclose(ends[False][k], ends[True][k], atol=1e-5) for k in ends[True])


def test_the_rollout_correction_compares_the_recorded_log_probs_and_weights_the_loss(
    tiny_lm, tmp_path
):
    """The fused rollout records its log-probs and the actor recomputes them: the same module
    and weights, so the mismatch metrics say ~0; an IcePop interval that no weight of ~1 lies in
    zeroes every token's policy loss (the weights reach the actor's loss)."""
    _, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        tmp_path,
        *length_reward(tmp_path),
        "actor.recompute_log_probs=true",
        "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=2.0_3.0",  # (2_3 would be 23)
    )
    runner = build_runner(config, plan_for_config(config))
    try:
        assert runner.passes.record_log_probs and not runner.passes.reuse_log_probs
        runner.sync()
        metrics = runner.iterate(1)
    finally:
        runner.close()
    assert abs(metrics["rollout_corr/kl"]) < 1e-4 and abs(metrics["rollout_corr/k3_kl"]) < 1e-6
    assert metrics["rollout_corr/rollout_ppl"] == pytest.approx(
        metrics["rollout_corr/training_ppl"], rel=1e-4
    )
    assert metrics["rollout_corr/rollout_is_oob_ratio"] == 1.0
    assert metrics["actor/pg_loss"] == 0.0


@pytest.mark.parametrize(
    "kl",
    [
        ["algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0"],
        [
            "algorithm.use_kl_in_reward=true",
            "algorithm.kl_ctrl.kl_coef=0",
            "algorithm.kl_ctrl.type=adaptive",
        ],
    ],
)
def test_a_reference_kl_of_coefficient_0_runs_no_reference_pass(tiny_lm, tmp_path, kl):
    _, dirs = tiny_lm
    config = tiny_config(dirs.actor.parent, tmp_path, *kl)
    runner = build_runner(config, plan_for_config(config))
    assert (
        set(runner.plan.components) == {"actor", "critic", "rollout", "reward"}
        and runner.ref is None
    )
    assert runner.run()["iterations"] == 2


def test_a_bad_model_path_is_named_before_anything_starts(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_entry_point(
            "reasoning/tiny_arith_ppo", [f"actor.model.path={tmp_path}/nope", "warmup.steps=0"]
        )
    assert exit_info.value.code == 2
    assert f"actor.model.path: {tmp_path}/nope is not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"has no config.json"):
        from rlcore.prepare import prepare_models

        prepare_models(
            tiny_config(tmp_path, tmp_path, f"actor.model.path={tmp_path}/empty", "warmup.steps=0")
        )


def test_bad_data_is_reported_with_the_file(tiny_lm, tmp_path, capsys):
    _, dirs = tiny_lm
    (tmp_path / "train.jsonl").write_text('{"problem": "1+1?", "answer": "#### 2"}\n')
    with pytest.raises(SystemExit):
        run_entry_point(
            "reasoning/tiny_arith_ppo",
            [
                *TINY,
                f"warmup.cache_dir={dirs.actor.parent}",
                f"data.train_files=[{tmp_path}/train.jsonl]",
            ],
        )
    err = capsys.readouterr().err
    assert "train.jsonl: row 0 has no field 'question' (data.prompt_key)" in err


def test_critic_warmup_trains_only_the_critic_at_first(tiny_lm, tmp_path):
    _, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent, tmp_path, "critic.critic_warmup=1", *length_reward(tmp_path)
    )
    runner = build_runner(config, plan_for_config(config))
    actor, critic = runner.actor, runner.critic
    snapshot = lambda m: {k: v.clone() for k, v in m.state_dict().items()}  # noqa: E731
    actor_start, critic_start = snapshot(actor.model), snapshot(critic.model)
    metrics = runner.iterate(1)
    assert "actor/pg_loss" not in metrics and "critic/vf_loss" in metrics
    assert all(torch.equal(v, actor_start[k]) for k, v in actor.model.state_dict().items())
    assert any(not torch.equal(v, critic_start[k]) for k, v in critic.model.state_dict().items())
    assert "actor/pg_loss" in runner.iterate(2)


def test_gsm8k_style_files_train_end_to_end(tiny_lm, tmp_path):
    _, dirs = tiny_lm
    rows = [
        {"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b:,}"}
        for a in range(10, 30)
        for b in (7, 991)
    ]
    for name, part in (("train", rows[:32]), ("test", rows[32:])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    files = (
        f"data.train_files=[{tmp_path}/train.jsonl]",
        f"data.val_files=[{tmp_path}/test.jsonl]",
    )
    config = tiny_config(dirs.actor.parent, tmp_path, *files, "runner.run_name=g")
    runner = build_runner(config, plan_for_config(config))
    assert len(runner.train_set) == 32 and len(runner.val_set) == 8
    assert "1,017" in runner.val_set.answers  # as written; the reward compares it as a number
    assert runner.run()["iterations"] == 2
    # The files are recorded in the checkpoint: a resume on a rewritten one is refused, by the
    # dry run too, unless asked for (and then the summary says so); fewer prompts never resume.
    train = tmp_path / "train.jsonl"
    text = train.read_text()
    train.write_text(text.replace("#### 17", "#### 18", 1))  # one answer, the same size
    more = (*files, "runner.run_name=g", "runner.resume=auto", "runner.total_iterations=3")
    changed = r"data.train_files: .*train.jsonl changed since the checkpoint \(the same size"
    config = tiny_config(dirs.actor.parent, tmp_path, *more)
    with pytest.raises(ConfigError, match=changed + r".* runner.resume_changed_data=true"):
        build_runner(config, plan_for_config(config))
    with pytest.raises(ConfigError, match=changed):
        preflight(config, plan_for_config(config))
    allowed = tiny_config(dirs.actor.parent, tmp_path, *more, "runner.resume_changed_data=true")
    train.write_text("".join(text.splitlines(keepends=True)[:30]))
    with pytest.raises(DataError, match=r"order covers 32 training prompts, these files give 30"):
        build_runner(allowed, plan_for_config(allowed))
    train.write_text(text.replace("#### 17", "#### 18", 1))
    summary = build_runner(allowed, plan_for_config(allowed)).run()
    assert summary["iterations"] == 3
    assert len(summary["resumed_on_changed_data"]) == 1
    assert re.match(changed, summary["resumed_on_changed_data"][0])


def test_a_reward_that_times_out_on_most_of_a_batch_ends_the_run_naming_it(tiny_lm, tmp_path):
    _, dirs = tiny_lm
    (tmp_path / "slow.py").write_text(
        "import time\ndef score(response, answer):\n    time.sleep(5)\n    return 1.0\n"
    )
    config = tiny_config(
        dirs.actor.parent,
        tmp_path,
        "reward.kind=custom",
        f"reward.rules.custom_fn={tmp_path}/slow.py:score",
        "reward.rules.timeout_s=0.2",
        "data.val_max_samples=4",
    )
    start = time.monotonic()
    with pytest.raises(
        ConfigError, match=r"reward.rules.max_timeout_share: 4 of 4 responses .*slow.py"
    ):
        run(config)
    assert time.monotonic() - start < 30  # the first batch, not minutes per batch


def test_remax_trains_asynchronously_and_its_first_iteration_is_the_synchronous_ones(
    tiny_lm, tmp_path, monkeypatch
):
    """ReMax with runner.max_staleness=1, the rollout apart: each iteration's baseline is the
    greedy answer of the weights the trainer holds (the rollout refuses a call at a version it
    was not synced), while the next batch generates ahead. Its first batch is made with the same
    weights, prompts and rollout process as a synchronous run's in the same layout, so that
    iteration's rewards, baselines and update equal the synchronous run's."""
    _, dirs = tiny_lm
    from rlcore.runners.reasoning import ReasoningRunner

    seen: dict[str, list[dict[str, float]]] = {}
    iterate = ReasoningRunner.iterate

    def recording(self, iteration):
        metrics = iterate(self, iteration)
        seen.setdefault(self.config.runner.run_name, []).append(metrics)
        return metrics

    monkeypatch.setattr(ReasoningRunner, "iterate", recording)
    (tmp_path / "chars.py").write_text("def score(response, answer):\n    return len(response)\n")
    common = (
        "algorithm.adv_type=remax",
        "algorithm.group_size=3",
        "reward.kind=custom",
        f"reward.rules.custom_fn={tmp_path}/chars.py:score",
        "reward.rules.num_processes=1",
        "runner.checkpoint_every=0",
        "cluster.devices_per_node=2",
        "cluster.component_placement={actor:0,rollout:1,reward:1}",
    )
    cache = dirs.actor.parent
    sync = tiny_config(cache, tmp_path, *common, "runner.total_iterations=1", "runner.run_name=s")
    run(sync)
    config = tiny_config(
        cache,
        tmp_path,
        *common,
        "runner.max_staleness=1",
        # (the synchronous run's correction: asynchronous runs default to bypass, which takes
        # the rollout's log-probs as the old ones where the synchronous run recomputes them)
        "algorithm.rollout_correction.bypass_mode=false",
        "runner.total_iterations=3",
        "runner.run_name=a",
    )
    summary = run(config)
    assert summary["iterations"] == 3 and summary["async"]["staleness_max"] == 1
    first, *later = seen["a"]
    assert [m["async/staleness"] for m in seen["a"]] == [0.0, 1.0, 1.0]
    (synchronous,) = seen["s"]
    for name in ("reward/mean", "reward/greedy_baseline_mean", "actor/pg_loss"):
        assert first[name] == synchronous[name], name
    assert all(m["reward/greedy_baseline_mean"] >= 0 for m in later)
