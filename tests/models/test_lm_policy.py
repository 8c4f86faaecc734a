"""The LM policy (``actor.model.type: lm``): its batched log-probs are a direct forward's, its value
head trains through the Huber loss, action tokens round-trip to env actions, and what it cannot
act on is refused before anything starts. The shipped task's instruction matters."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.columns import LOSS_MASK, OLD_LOG_PROBS
from rlcore.config import ConfigError, load_config
from rlcore.envs import EnvError, make_vector_env, space_spec
from rlcore.envs.color_reach import COLOURS, ColorReach
from rlcore.envs.language import TextObservation, decode_instructions
from rlcore.envs.vector import SpaceSpec
from rlcore.models.lm_policy import LMPolicy, check_lm_policy
from rlcore.placement import plan_for_config
from rlcore.runners.preflight import preflight
from rlcore.workers.embodied.embodied_actor import EmbodiedActor
from rlcore.workers.embodied.embodied_rollout import make_policy

TINY = [
    "actor.model.type=lm",
    "actor.model.lm.tiny.hidden_size=32",
    "actor.model.lm.tiny.intermediate_size=64",
    "actor.model.lm.tiny.num_heads=2",
]


def reach_spec(continuous: bool = False) -> SpaceSpec:
    envs = make_vector_env("color_reach", 1, "sync", {"continuous": continuous})
    try:
        return space_spec(envs, "color_reach")
    finally:
        envs.close()


def observations(n: int, continuous: bool = False) -> torch.Tensor:
    """``n`` wrapped color_reach observations, instructions of different lengths among them."""
    env = TextObservation(ColorReach(continuous=continuous))
    return torch.as_tensor(np.stack([env.reset(seed=s)[0] for s in range(n)]))


def policy(*extra: str, continuous: bool = False, bins: int = 8) -> LMPolicy:
    """The tiny LM policy, or with ``actor.model.lm.path`` in ``extra`` that folder's."""
    shape = TINY[:1] if any(k.startswith("actor.model.lm.path=") for k in extra) else TINY
    cfg = load_config(
        "embodied/cartpole_ppo", [*shape, f"actor.model.lm.action_bins={bins}", *extra]
    )
    return make_policy(cfg, reach_spec(continuous))


def direct_log_prob(p: LMPolicy, obs: torch.Tensor, tokens: torch.Tensor) -> float:
    """One observation through the whole causal LM, no padding: the instruction's character ids
    embedded, the state token, the earlier action tokens; log-softmax over the action rows of
    the full vocabulary's logits at each dimension's position."""
    length, charset = p.spec.obs_text or (0, "")
    text = decode_instructions(obs[None, :length].numpy(), charset)[0] if length else ""
    if p.tokenizer is None:  # the tiny model's vocabulary: the characters' codes
        ids = torch.tensor([[charset.index(c) + 1 for c in text]], dtype=torch.long)
    else:  # a model folder's tokenizer
        ids = torch.tensor([p.tokenizer(text, add_special_tokens=False)["input_ids"]])
    parts = [p.lm.get_input_embeddings()(ids), p.state_proj(obs[None, length:])[:, None]]
    if len(tokens) > 1:
        parts.append(p.lm.get_input_embeddings()(p.action_ids[tokens[None, :-1]]))
    logits = p.lm(inputs_embeds=torch.cat(parts, dim=1)).logits[0]  # [S, vocab]
    first = ids.shape[1]  # the state token's position
    total = 0.0
    for d, token in enumerate(tokens):
        row = logits[first + d, p.action_ids][: p.dims[d]]
        total += float(torch.log_softmax(row.double(), -1)[token])
    return total


def test_a_state_only_env_with_many_action_dimensions_scores_as_a_direct_forward():
    """No instruction (the state token alone), 8 binned Box dimensions: the teacher-forced
    sequence is longer than the prompt (ManiSkill's PickCube shape)."""
    torch.manual_seed(0)
    spec = SpaceSpec((5,), "box", (8,), -np.ones(8, np.float32), np.ones(8, np.float32))
    p = LMPolicy(spec, load_config("embodied/cartpole_ppo", TINY).actor.model.lm)
    obs = torch.randn(4, 5)
    with torch.no_grad():
        actions, acted, _ = p.act(obs, generator=torch.Generator().manual_seed(1))
        scored, _, _ = p.evaluate(obs, actions)
        tokens = p.action_tokens(actions)
        for i in range(4):
            assert scored[i].item() == pytest.approx(
                direct_log_prob(p, obs[i], tokens[i]), abs=1e-5
            )
    assert actions.shape == (4, 8) and torch.allclose(acted, scored, atol=1e-5)


@pytest.mark.parametrize(
    ("continuous", "folder"),
    [(False, False), (True, False), (True, True)],
    ids=["discrete", "binned-box", "model-folder"],
)
def test_batched_log_probs_equal_a_direct_forward_of_each_observation(continuous, folder, request):
    """Also with a Hugging Face model folder (the tiny reasoning model, its BPE tokenizer)."""
    torch.manual_seed(0)
    path = []
    if folder:
        path = [f"actor.model.lm.path={request.getfixturevalue('tiny_lm')[1].actor}"]
    p = policy(*path, continuous=continuous)
    assert (p.tokenizer is not None) == folder
    obs = observations(6, continuous)
    lengths = {len(t) for t in decode_instructions(obs[:, :32].numpy(), p.spec.obs_text[1])}
    assert len(lengths) > 1  # rows padded differently in the batch
    with torch.no_grad():
        actions, acted, values = p.act(obs, generator=torch.Generator().manual_seed(1))
        scored, entropy, values_again = p.evaluate(obs, actions)
        tokens = p.action_tokens(actions)
        for i in range(len(obs)):
            assert scored[i].item() == pytest.approx(
                direct_log_prob(p, obs[i], tokens[i]), abs=1e-5
            )
    assert torch.allclose(acted, scored, atol=1e-5) and torch.allclose(values, values_again)
    assert (entropy > 0).all()


def test_an_image_entry_scores_as_llava_s_own_forward_with_image_placeholders():
    """The env's image through the tiny LLaVA: the policy's batched log-probs equal the
    transformers model's own forward of each observation, whose image features LLaVA itself
    puts at placeholder positions (pixels normalised here by hand: x / 255, mean 0.5, std 0.5;
    16 px images, the tower's side, so no resize)."""
    torch.manual_seed(0)
    envs = make_vector_env("color_reach", 5, "sync", {"image_size": 16})
    try:
        spec = space_spec(envs, "color_reach")
        obs = torch.as_tensor(envs.reset(seed=3)[0])
    finally:
        envs.close()
    cfg = load_config("embodied/cartpole_ppo", [*TINY, "actor.model.lm.action_bins=8"])
    p = make_policy(cfg, spec)
    assert type(p.lm).__name__ == "LlavaForConditionalGeneration" and spec.obs_image == (16, 16, 3)
    with torch.no_grad():
        actions, acted, _ = p.act(obs, generator=torch.Generator().manual_seed(1))
        scored, _, _ = p.evaluate(obs, actions)
        tokens = p.action_tokens(actions)
        embed = p.lm.get_input_embeddings()
        slots = (16 // 4) ** 2  # patches of the 16 px image
        for i in range(len(obs)):
            row = obs[i].numpy()
            text = decode_instructions(row[None, :32], spec.obs_text[1])[0]
            ids = torch.tensor([[spec.obs_text[1].index(c) + 1 for c in text]])
            image = torch.as_tensor(row[32 : 32 + 16 * 16 * 3]).reshape(16, 16, 3)
            pixels = (image.permute(2, 0, 1)[None] / 255.0 - 0.5) / 0.5
            placeholder = torch.full((1, slots), p.lm.config.image_token_id)
            parts = [embed(ids), embed(placeholder), p.state_proj(obs[i, -2:])[None, None]]
            parts.append(embed(p.action_ids[tokens[i : i + 1]]))  # (one dimension: not read)
            logits = p.lm(inputs_embeds=torch.cat(parts, 1), pixel_values=pixels).logits[0]
            state_at = ids.shape[1] + slots
            direct = torch.log_softmax(logits[state_at, p.action_ids][:4].double(), -1)
            assert scored[i].item() == pytest.approx(direct[tokens[i, 0]].item(), abs=1e-5)
    assert torch.allclose(acted, scored, atol=1e-5)


def test_the_value_head_trains_through_the_huber_value_loss():
    """Advantages 0 and no entropy bonus: the gradient is the value loss's. Every return lies 5
    above its value, in Huber's linear region, so d loss / d value_head.bias is value_coef x
    delta x -1 (the squared error would give value_coef x -5)."""
    delta, coef = 1.0, 0.5
    cfg = load_config(
        "embodied/cartpole_ppo",
        [
            *TINY,
            "actor.model.lm.action_bins=4",
            "actor.ppo_epochs=1",
            "actor.ppo_mini_batch_size=8",
            "algorithm.entropy_bonus=0",
            "algorithm.value_clip=null",
            f"algorithm.huber_delta={delta}",
            f"algorithm.value_coef={coef}",
            "actor.optim.max_grad_norm=null",
        ],
    )
    spec = reach_spec()
    ctx = SimpleNamespace(rank=0, world_size=1, group=None, torch_device=torch.device("cpu"))
    actor = EmbodiedActor(ctx, cfg, spec)
    obs = observations(8)
    with torch.no_grad():
        actions, log_probs, values = actor.model.act(obs)
    col = lambda x: x[:, None]  # noqa: E731
    batch = {
        "obs": col(obs),
        "actions": col(actions),
        OLD_LOG_PROBS: col(log_probs),
        "values": col(values),
        "advantages": torch.zeros(8, 1),
        "returns": col(values + 5.0),
        LOSS_MASK: torch.ones(8, 1, dtype=torch.bool),
    }
    from tensordict import TensorDict

    metrics = actor.update(TensorDict(batch, batch_size=[8]))
    assert actor.model.value_head.bias.grad.item() == pytest.approx(-coef * delta, rel=1e-4)
    assert metrics["critic/vf_loss"] == pytest.approx(delta * (5.0 - delta / 2), rel=1e-4)


def test_action_tokens_round_trip_to_env_actions():
    discrete = policy(bins=4)
    moves = torch.arange(4)
    assert discrete.env_actions(discrete.action_tokens(moves)).equal(moves)
    box = policy(continuous=True, bins=5)  # [-1, 1] in 5 bins of 0.4: centres -0.8 ... 0.8
    tokens = torch.tensor([[0, 4], [2, 1], [3, 3]])
    actions = box.env_actions(tokens)
    assert torch.allclose(actions, torch.tensor([[-0.8, 0.8], [0.0, -0.4], [0.4, 0.4]]))
    assert box.action_tokens(actions).equal(tokens)
    edges = torch.tensor([[-1.0, 1.0]])  # the bounds fall in the outer bins
    assert box.action_tokens(edges).equal(torch.tensor([[0, 4]]))
    multi = SpaceSpec((3,), "multi_discrete", (3, 2))
    m = LMPolicy(multi, load_config("embodied/cartpole_ppo", TINY).actor.model.lm)
    picks = torch.tensor([[2, 1], [0, 0]])
    assert m.env_actions(m.action_tokens(picks)).equal(picks)


def test_a_policy_that_ignores_the_instruction_reaches_about_one_target_in_three():
    """The env's property the task rests on: heading for the first target (the red one) always
    succeeds in about 1/3 of the episodes, following the instruction in all of them."""
    rates = {}
    for name in ("ignores", "follows"):
        successes = 0
        for seed in range(300):
            env = ColorReach()
            obs, _ = env.reset(seed=seed)
            goal = 0 if name == "ignores" else COLOURS.index(obs["instruction"].split()[2])
            done, info = False, {}
            while not done:
                gap = env.spots[goal] - env.agent
                move = (
                    (0 if gap[1] > 0 else 1)
                    if abs(gap[1]) > abs(gap[0])
                    else (3 if gap[0] > 0 else 2)
                )
                obs, _, term, trunc, info = env.step(move)
                done = term or trunc
            successes += info["is_success"]
        rates[name] = successes / 300
    assert 0.25 < rates["ignores"] < 0.42 and rates["follows"] > 0.9


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["actor.model.lm.action_bins=2"], "actor.model.lm.action_bins: 2 action tokens"),
        (["env.normalize_obs=true"], "env.normalize_obs: an LM policy reads the instruction"),
        (
            ["actor.model.hidden_sizes=[8]"],
            "actor.model.hidden_sizes: set, but actor.model.type=lm",
        ),
        (["actor.model.lm.path=/no/such/model"], "actor.model.lm.path: /no/such/model is not"),
        (
            ["actor.model.lm.path=/no/such/model", *TINY[1:]],
            "actor.model.lm.tiny: set, but actor.model.lm.path gives the model",
        ),
        (
            ["env.kwargs={image_size:10}"],
            r"actor.model.lm.vision.patch_size: 4 does not divide the image side 10",
        ),
    ],
)
def test_what_an_lm_policy_cannot_act_on_is_refused_before_start(tmp_path, extra, message):
    shape = TINY[:1] if any(k.startswith("actor.model.lm.path=") for k in extra) else TINY
    with pytest.raises(ConfigError, match=message):
        cfg = load_config(
            "embodied/lm_policy_reach_ppo", [f"runner.output_dir={tmp_path}", *shape, *extra]
        )
        preflight(cfg, plan_for_config(cfg))


def test_an_image_entry_with_a_model_that_has_no_vision_encoder_is_refused(tmp_path, tiny_lm):
    cfg = load_config(
        "embodied/lm_policy_reach_ppo",
        [
            f"runner.output_dir={tmp_path}",
            "actor.model.type=lm",
            f"actor.model.lm.path={tiny_lm[1].actor}",
            "env.kwargs={image_size:16}",
        ],
    )
    with pytest.raises(ConfigError, match=r"a qwen2 model without a LLaVA-style vision encoder"):
        preflight(cfg, plan_for_config(cfg))


def test_the_lm_section_without_the_lm_type_is_refused():
    with pytest.raises(
        ConfigError, match=r"actor\.model\.lm: set, but actor\.model\.type is actor_critic"
    ):
        load_config("embodied/cartpole_ppo", ["actor.model.lm.action_bins=8"])


def test_an_unbounded_box_is_refused_for_binning():
    spec = SpaceSpec((3,), "box", (1,), np.array([-np.inf]), np.array([np.inf]))
    lm = load_config("embodied/cartpole_ppo", TINY).actor.model.lm
    with pytest.raises(ConfigError, match="unbounded"):
        check_lm_policy(spec, lm, normalize_obs=False)


def test_an_lm_policy_run_with_images_and_lora_exports_a_policy_that_acts_as_trained(tmp_path):
    """A run of the tiny LLaVA policy with LoRA on color_reach's images; its export (adapters
    merged into the weights) scores actions as the checkpoint's adapter model does (1e-5), acts
    on the env's own Dict observations, and its language model is a transformers folder."""
    from transformers import AutoModelForImageTextToText

    from rlcore import load_policy
    from rlcore.export import export
    from rlcore.runners.checkpoint import find_checkpoint
    from rlcore.runners.embodied import EmbodiedRunner
    from rlcore.workers.files.weights_file import read_trained_weights

    cfg = load_config(
        "embodied/lm_policy_reach_ppo",
        [
            *TINY,
            f"runner.output_dir={tmp_path}",
            "runner.run_name=r",
            "env.kwargs={image_size:8}",
            "actor.model.lm.lora.rank=4",
            "actor.optim.lr=0.01",
            "env.num_envs=4",
            "runner.rollout_steps=8",
            "runner.total_env_steps=64",
            "actor.ppo_mini_batch_size=16",
            "runner.eval_episodes=4",
            "runner.progress=false",
            "logger.tensorboard=false",
        ],
    )
    summary = EmbodiedRunner(cfg, plan_for_config(cfg)).run()
    assert summary["iterations"] == 2 and 0.0 <= summary["eval_success_rate"] <= 1.0
    export(tmp_path / "r", tmp_path / "out")

    env = ColorReach(image_size=8)
    raw = [env.reset(seed=s)[0] for s in range(6)]
    batch = {
        "instruction": tuple(o["instruction"] for o in raw),
        "state": np.stack([o["state"] for o in raw]),
        "image": np.stack([o["image"] for o in raw]),
    }
    wrapped = TextObservation(ColorReach(image_size=8))
    obs = torch.as_tensor(np.stack([wrapped.observation(o) for o in raw]))
    spec = space_spec_of(wrapped)
    trained = make_policy(cfg, spec)
    trained.load_state_dict(
        read_trained_weights(find_checkpoint(tmp_path / "r") / "actor", trained)
    )
    assert any(".lora_B" in n and w.abs().sum() > 0 for n, w in trained.named_parameters())
    exported = load_policy(tmp_path / "out")
    assert not any(".lora_" in n for n, _ in exported.model.named_parameters())
    with torch.no_grad():
        actions, _, _ = trained.act(obs, generator=torch.Generator().manual_seed(0))
        ours, _, our_values = trained.eval().evaluate(obs, actions)
        theirs, _, their_values = exported.model.evaluate(obs, actions)
        greedy, _, _ = trained.act(obs, deterministic=True)
    assert torch.allclose(ours, theirs, atol=1e-5) and torch.allclose(
        our_values, their_values, atol=1e-5
    )
    assert np.array_equal(exported(batch), greedy.numpy())  # the env's Dict batch
    assert exported(raw[0]) == greedy[0].item()  # one observation
    width = obs.shape[1]  # 32 character codes, 8 x 8 x 3 pixels, 2 state values
    with pytest.raises(EnvError, match=rf"has shape \(5,\); .* rows of {width} floats \(32 ch"):
        exported(np.zeros(5, np.float32))  # flattened, of another env
    AutoModelForImageTextToText.from_pretrained(tmp_path / "out" / "lm")


def space_spec_of(env) -> SpaceSpec:
    envs = gym.vector.SyncVectorEnv([lambda: env])
    return space_spec(envs, "color_reach")


def test_with_lora_only_the_adapters_the_state_projection_and_the_value_head_train():
    torch.manual_seed(0)
    p = policy("actor.model.lm.lora.rank=4", bins=4)
    trained = {n for n, w in p.named_parameters() if w.requires_grad}
    assert trained and all(
        ".lora_" in n or n.startswith(("state_proj.", "value_head.")) for n in trained
    )
    assert any(".lora_" in n for n in trained)
    frozen = {n: w.detach().clone() for n, w in p.named_parameters() if not w.requires_grad}
    optimiser = torch.optim.Adam([w for w in p.parameters() if w.requires_grad], lr=0.1)
    obs = observations(4)
    actions, _, _ = p.act(obs)
    log_probs, _, values = p.evaluate(obs, actions)
    (values.sum() - log_probs.sum()).backward()
    optimiser.step()
    assert all(w.equal(frozen[n]) for n, w in p.named_parameters() if n in frozen)
    with torch.no_grad():  # the adapters now change what the policy computes
        assert not torch.allclose(p.evaluate(obs, actions)[0], log_probs)
