"""verl's policy loss modes (verl/trainer/ppo/core_algos.py, v0.9.0): clip_cov, kl_cov, cispo,
sapo, geo_mean, dppo_tv, dppo_kl, dro and the name vanilla. Values and gradients are worked out
by hand on a 2x3 batch whose last token of row 0 is padding, or come from closed forms at
ratio 1; then the contract every loss keeps (masking, metrics, micro-batches) and the config:
options, embodied refusals and verl's spellings."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcore.algorithms import get_policy_loss_fn, policy_loss
from rlcore.algorithms.policy_loss import POLICY_LOSSES
from rlcore.config import ConfigError, load_config
from tests.algorithms.microbatching import assert_micro_batches_match_full_batch, split_batches

F64 = torch.float64
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])  # (0, 2) is padding
N_VALID = 5
NEW_LOSSES = ["clip_cov", "kl_cov", "cispo", "sapo", "geo_mean", "dppo_tv", "dppo_kl", "dro"]
OPTIONS = {"dro": {"dro_beta": 0.1}}  # dro has no default for its one option


def t(rows):
    return torch.tensor(rows, dtype=F64)


def loss_and_grad(name, old, new, adv, mask=MASK, **kwargs):
    new = new.clone().requires_grad_()
    fn = get_policy_loss_fn(name)
    loss, metrics = fn(old, new, adv, mask, **{**OPTIONS.get(name, {}), **kwargs})
    (grad,) = torch.autograd.grad(loss, new)
    return loss.item(), grad, {k: v.item() for k, v in metrics.items()}


# Shared example: per-token log-ratios l = new - old and advantages; 9.0 is padding garbage.
OLD = t([[-1.0, -1.0, 9.0], [-2.0, -0.5, -1.0]])
L = t([[0.5, -0.1, 9.0], [0.0, -0.5, 0.1]])
NEW = OLD + L  # [[-0.5, -1.1, pad], [-2.0, -1.0, -0.9]]
ADV = t([[1.0, -1.0, 9.0], [2.0, -2.0, 0.5]])
A_, L_, LP_ = (
    [1.0, -1.0, 2.0, -2.0, 0.5],
    [0.5, -0.1, 0.0, -0.5, 0.1],
    [-0.5, -1.1, -2.0, -1.0, -0.9],
)


def test_vanilla_is_verls_name_for_ppo():
    assert get_policy_loss_fn("vanilla") is policy_loss is get_policy_loss_fn("ppo")


def test_cispo_weights_the_log_prob_by_the_clipped_ratio_held_constant():
    loss, grad, m = loss_and_grad("cispo", OLD, NEW, ADV, clip_ratio_low=0.2, clip_ratio_high=0.2)
    # r = e^l: e^0.5 = 1.649 -> 1.2 (clamped), e^-0.1 = 0.905, e^0 = 1, e^-0.5 = 0.607 -> 0.8
    # (clamped), e^0.1 = 1.105; per token -w * A * new.
    w = [1.2, math.exp(-0.1), 1.0, 0.8, math.exp(0.1)]
    assert loss == pytest.approx(
        sum(-wi * ai * li for wi, ai, li in zip(w, A_, LP_, strict=True)) / N_VALID
    )
    # Every token keeps a gradient -w A / 5, the clamped ones too (PPO would zero them).
    expected = t([[-1.2 / 5, w[1] / 5, 0.0], [-2.0 / 5, 1.6 / 5, -w[4] * 0.5 / 5]])
    assert torch.allclose(grad, expected)
    assert m["pg_clipfrac"] == pytest.approx(2 / 5) and m["pg_clipfrac_lower"] == 0.0
    assert m["ppo_kl"] == pytest.approx(-(0.5 - 0.1 + 0.0 - 0.5 + 0.1) / 5)


def test_sapo_gates_each_token_with_its_signs_temperature():
    loss, grad, _ = loss_and_grad("sapo", OLD, NEW, ADV, tau_pos=1.0, tau_neg=2.0)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    # (A, r, tau): tau_pos where A > 0, else tau_neg
    rows = [(a, math.exp(lr), 1.0 if a > 0 else 2.0) for a, lr in zip(A_, L_, strict=True)]
    # f = sigmoid(tau (r - 1)) * 4 / tau; loss -f A; d f / d log p = 4 s (1 - s) r
    assert loss == pytest.approx(sum(-sig(k * (r - 1)) * 4 / k * a for a, r, k in rows) / 5)
    grads = [-a * 4 * sig(k * (r - 1)) * (1 - sig(k * (r - 1))) * r / 5 for a, r, k in rows]
    assert torch.allclose(grad, t([[grads[0], grads[1], 0.0], grads[2:]]))


def test_dro_is_the_policy_gradient_with_a_quadratic_log_ratio_penalty():
    loss, grad, m = loss_and_grad("dro", OLD, NEW, ADV, dro_beta=0.5)
    # -(A log p - 0.25 l^2), gradient (-A + 0.5 l) / 5
    assert loss == pytest.approx(
        sum(-(a * lp - 0.25 * lr * lr) for a, lr, lp in zip(A_, L_, LP_, strict=True)) / 5
    )
    g = [(-a + 0.5 * lr) / 5 for a, lr in zip(A_, L_, strict=True)]
    assert torch.allclose(grad, t([[g[0], g[1], 0.0], g[2:]]))
    assert m["pg_clipfrac"] == m["pg_clipfrac_lower"] == 0.0


def test_dro_without_its_beta_is_refused():
    with pytest.raises(ValueError, match="dro_beta"):
        get_policy_loss_fn("dro")(OLD, NEW, ADV, MASK)


def test_geo_mean_takes_each_sequences_geometric_mean_of_one_side_clipped_ratios():
    adv = t([[1.0, 1.0, 9.0], [-2.0, -2.0, -2.0]])  # one advantage per sequence, as GMPO has
    loss, grad, m = loss_and_grad(
        "geo_mean", OLD, NEW, adv, clip_ratio_low=0.2, clip_ratio_high=0.2
    )
    # Row 0 (A > 0): l = [0.5, -0.1], the 0.5 capped at 0.2 -> mean 0.05, loss -1 * e^0.05.
    # Row 1 (A < 0): l = [0.0, -0.5, 0.1], the -0.5 raised to -0.2 -> mean -0.1/3, loss 2 e^(-1/30).
    s0, s1 = math.exp(0.05), math.exp(-0.1 / 3)
    assert loss == pytest.approx((-s0 + 2 * s1) / 2)  # mean over the 2 sequences
    # d/dl_t of -A e^(mean l) = -A e^(mean) / len, over 2 sequences; clipped tokens get 0.
    expected = t([[0.0, -s0 / 2 / 2, 0.0], [2 * s1 / 3 / 2, 0.0, 2 * s1 / 3 / 2]])
    assert torch.allclose(grad, expected)
    assert m["pg_clipfrac"] == pytest.approx(1 / 5)  # the 0.5 with A > 0
    assert m["pg_clipfrac_lower"] == pytest.approx(1 / 5)  # the -0.5 with A < 0


def test_geo_mean_ignores_loss_agg_mode_it_is_per_sequence():
    modes = ["token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
    values = {loss_and_grad("geo_mean", OLD, NEW, ADV, loss_agg_mode=m)[0] for m in modes}
    assert len(values) == 1


def probs(rows):
    return torch.log(t(rows))


# DPPO: old and new probabilities of the sampled token; A > 0 on row 0, A < 0 on row 1.
P_OLD = [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]
P_NEW = [[0.8, 0.6, 0.9], [0.3, 0.4, 0.7]]
ADV_PM = t([[1.0, 2.0, 9.0], [-1.0, -3.0, -2.0]])


def test_dppo_tv_bounds_the_probability_change_in_the_direction_the_advantage_pushes():
    loss, grad, m = loss_and_grad(
        "dppo_tv", probs(P_OLD), probs(P_NEW), ADV_PM, clip_ratio_low=0.15, clip_ratio_high=0.15
    )
    # Changes p - p_old: row 0 (A > 0, bound +0.15): +0.3 out, +0.1 in; row 1 (A < 0, bound
    # -0.15): -0.2 out, -0.1 in, +0.2 in (a move against the push is not bounded).
    # Inside: -A * sg(r) * log p; gradient -A r / 5 with r = p / p_old.
    inside = [(2.0, 0.6), (-3.0, 0.4), (-2.0, 0.7)]
    assert loss == pytest.approx(sum(-a * p / 0.5 * math.log(p) for a, p in inside) / 5)
    expected = t([[0.0, -2.0 * 1.2 / 5, 0.0], [0.0, 3.0 * 0.8 / 5, 2.0 * 1.4 / 5]])
    assert torch.allclose(grad, expected)
    assert m["pg_clipfrac"] == pytest.approx(2 / 5)
    assert m["pg_clipfrac_lower"] == 0.0  # no ratio above c = 3 (the largest is 1.8)


def test_dppo_truncates_the_ratio_at_clip_ratio_c():
    old, new = probs([[0.01, 0.5, 0.5]]), probs([[0.1, 0.5, 0.5]])  # r = 10, p rises 0.09
    adv, mask = t([[1.0, 0.0, 0.0]]), torch.tensor([[1, 0, 0]])
    for name in ("dppo_tv", "dppo_kl"):
        loss, grad, m = loss_and_grad(name, old, new, adv, mask, clip_ratio_c=3.0)
        assert loss == pytest.approx(-3.0 * math.log(0.1))
        assert grad[0, 0].item() == pytest.approx(-3.0)
        assert m["pg_clipfrac_lower"] == 1.0
        _, grad, _ = loss_and_grad(name, old, new, adv, mask)  # null c: 3, a verl run's
        assert grad[0, 0].item() == pytest.approx(-3.0)
        _, grad, _ = loss_and_grad(name, old, new, adv, mask, clip_ratio_c=20.0)  # the paper's
        assert grad[0, 0].item() == pytest.approx(-10.0)


def test_dppo_kl_bounds_the_binary_kl_when_the_move_follows_the_advantage():
    p_new = [[0.8, 0.1, 0.9], [0.3, 0.4, 0.7]]
    loss, grad, m = loss_and_grad(
        "dppo_kl", probs(P_OLD), probs(p_new), ADV_PM, clip_ratio_low=0.05, clip_ratio_high=0.05
    )

    def binary_kl(q, p):  # KL((q, 1-q) || (p, 1-p))
        return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))

    # Row 0, A > 0: 0.5 -> 0.8, D = 0.223 > 0.05: out; 0.5 -> 0.1, D = 0.511 but against the
    # push: in. Row 1, A < 0: 0.5 -> 0.3, D = 0.087: out; 0.5 -> 0.4, D = 0.020: in;
    # 0.5 -> 0.7, D = 0.087 but against the push: in.
    assert binary_kl(0.5, 0.8) > 0.05 and binary_kl(0.5, 0.1) > 0.05
    assert binary_kl(0.5, 0.3) > 0.05 > binary_kl(0.5, 0.4) and binary_kl(0.5, 0.7) > 0.05
    inside = [(2.0, 0.1), (-3.0, 0.4), (-2.0, 0.7)]
    assert loss == pytest.approx(sum(-a * p / 0.5 * math.log(p) for a, p in inside) / 5)
    expected = t([[0.0, -2.0 * 0.2 / 5, 0.0], [0.0, 3.0 * 0.8 / 5, 2.0 * 1.4 / 5]])
    assert torch.allclose(grad, expected)
    assert m["pg_clipfrac"] == pytest.approx(2 / 5)


# clip_cov / kl_cov: new log-probs and advantages with covariances worked out by hand.
# mean A = (2 + 2 - 1 - 1 - 1) / 5 = 0.2; mean log p = (-0.5 - 2.5 - 1.5 * 3) / 5 = -1.5;
# cov = (A - 0.2)(log p + 1.5) = [[1.8 * 1.0, 1.8 * -1.0], [0, 0, 0]] = [[1.8, -1.8], [0, 0, 0]].
# Counted, the padding would have cov (2.2 - 0.2)(0 + 1.5) = 3: in clip_cov's band, kl_cov's top.
COV_NEW = t([[-0.5, -2.5, 0.0], [-1.5, -1.5, -1.5]])
COV_ADV = t([[2.0, 2.0, 2.2], [-1.0, -1.0, -1.0]])


def test_clip_cov_cuts_the_gradient_of_the_token_whose_covariance_is_in_the_band():
    # Ratio 1 (old = new): no PPO clip. Only cov 1.8 is in (1, 5): token (0, 0) is cut; the
    # default ratio asks for max(1, int(0.0002 * 5)) = 1 token, whatever the random draw.
    for seed in range(4):
        torch.manual_seed(seed)
        loss, grad, m = loss_and_grad("clip_cov", COV_NEW, COV_NEW, COV_ADV)
        assert loss == pytest.approx((0.0 - 2.0 + 1.0 + 1.0 + 1.0) / 5)  # -A a token, (0,0) cut
        assert torch.allclose(grad, t([[0.0, -2.0 / 5, 0.0], [0.2, 0.2, 0.2]]))
        assert m["pg_clipfrac"] == pytest.approx(1 / 5)


def test_clip_cov_cuts_clip_cov_ratio_of_the_tokens_at_random_among_the_candidates():
    adv = t([[2.0, -2.0, 0.0], [-1.0, -1.0, -1.0]])  # mean -0.6; cov [[2.6, 1.4], [0, 0, 0]]
    cut = set()
    for seed in range(8):
        torch.manual_seed(seed)
        _, grad, m = loss_and_grad("clip_cov", COV_NEW, COV_NEW, adv, clip_cov_ratio=0.2)
        assert m["pg_clipfrac"] == pytest.approx(1 / 5)  # int(0.2 * 5) = 1 of the 2 candidates
        zero = {(i, j) for i, j in [(0, 0), (0, 1)] if grad[i, j] == 0}
        assert len(zero) == 1
        cut |= zero
    assert cut == {(0, 0), (0, 1)}  # either candidate can be drawn


def test_clip_cov_never_cuts_a_token_the_ppo_clip_took():
    old = COV_NEW - t([[0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])  # token (0, 0): r = e^0.5, A > 0
    loss, _, m = loss_and_grad("clip_cov", old, COV_NEW, COV_ADV)
    ppo, _, _ = loss_and_grad("ppo", old, COV_NEW, COV_ADV)
    assert m["pg_clipfrac"] == 0.0 and loss == pytest.approx(ppo)


@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 10_000))
@settings(max_examples=20)
def test_clip_cov_is_ppo_without_dual_clip_when_no_covariance_is_in_the_band(b, t_, seed):
    gen = torch.Generator().manual_seed(seed)
    old = torch.randn(b, t_, generator=gen, dtype=F64)
    new = old + 0.3 * torch.randn(b, t_, generator=gen, dtype=F64)
    adv = torch.randn(b, t_, generator=gen, dtype=F64)
    mask = torch.rand(b, t_, generator=gen) < 0.7
    for lb, ub in [(5.0, 5.0), (1e6, 2e6)]:  # an empty band; a band no covariance reaches
        got = loss_and_grad("clip_cov", old, new, adv, mask, clip_cov_lb=lb, clip_cov_ub=ub)
        want = loss_and_grad("ppo", old, new, adv, mask)
        assert got[0] == pytest.approx(want[0]) and torch.allclose(got[1], want[1])


def test_kl_cov_penalises_the_largest_covariance_token_with_its_abs_log_ratio():
    lr = t([[0.1, -0.2, 0.0], [0.0, 0.3, -0.1]])
    loss, grad, m = loss_and_grad("kl_cov", COV_NEW - lr, COV_NEW, COV_ADV, ppo_kl_coef=0.5)
    # -A e^l everywhere (no clip), + 0.5 |l| on the top-1 covariance token (0, 0).
    per_token = [
        -2 * math.exp(0.1) + 0.5 * 0.1,
        -2 * math.exp(-0.2),
        1.0,
        math.exp(0.3),
        math.exp(-0.1),
    ]
    assert loss == pytest.approx(sum(per_token) / 5)
    expected = t(
        [
            [(-2 * math.exp(0.1) + 0.5) / 5, -2 * math.exp(-0.2) / 5, 0.0],
            [1 / 5, math.exp(0.3) / 5, math.exp(-0.1) / 5],
        ]
    )
    assert torch.allclose(grad, expected)
    assert m["pg_clipfrac"] == 0.0


@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 10_000))
@settings(max_examples=20)
def test_kl_cov_without_its_penalty_is_the_unclipped_surrogate(b, t_, seed):
    gen = torch.Generator().manual_seed(seed)
    old = torch.randn(b, t_, generator=gen, dtype=F64)
    new = old + 0.3 * torch.randn(b, t_, generator=gen, dtype=F64)
    adv = torch.randn(b, t_, generator=gen, dtype=F64)
    mask = torch.rand(b, t_, generator=gen) < 0.7
    got = loss_and_grad("kl_cov", old, new, adv, mask, ppo_kl_coef=0.0, kl_cov_ratio=1.0)
    # ppo with a band no ratio leaves (e^(0.3 * 6) < 7): the plain -A r
    want = loss_and_grad("ppo", old, new, adv, mask, clip_ratio_low=0.999, clip_ratio_high=1e3)
    assert got[0] == pytest.approx(want[0]) and torch.allclose(got[1], want[1])


# At ratio 1 (new == old): the value and the gradient of each loss in closed form, token-mean
# over the 5 valid tokens. A REINFORCE-style loss is -A log p; a surrogate -A; SAPO -A 2 / tau.
AT_ONE = {
    "ppo": lambda a, lp: -a,
    "clip_cov": lambda a, lp: -a,  # no covariance of this batch lies in (1, 5)
    "kl_cov": lambda a, lp: -a,  # |l| = 0, and its gradient at 0 is 0
    "cispo": lambda a, lp: -a * lp,
    "sapo": lambda a, lp: -a * 2 / (1.0 if a > 0 else 1.05),
    "dppo_tv": lambda a, lp: -a * lp,
    "dppo_kl": lambda a, lp: -a * lp,
    "dro": lambda a, lp: -a * lp,
    "gpg": lambda a, lp: -a * lp,
}


@pytest.mark.parametrize("name", list(AT_ONE))
def test_at_ratio_one_each_loss_is_its_plain_policy_gradient(name):
    lp = t([[-0.5, -1.1, 9.0], [-2.0, -1.0, -0.9]])
    adv = t([[0.3, -0.2, 9.0], [0.1, -0.4, 0.25]])  # covariances all below 1
    value = AT_ONE[name]
    loss, grad, m = loss_and_grad(name, lp, lp, adv)
    tokens = [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert loss == pytest.approx(sum(value(adv[i].item(), lp[i].item()) for i in tokens) / 5)
    assert torch.allclose(grad, -adv * MASK / 5)  # the policy gradient -A / 5
    assert m["ppo_kl"] == 0.0


def test_at_ratio_one_geo_mean_is_minus_each_sequences_mean_advantage():
    lp, adv = NEW, t([[0.3, -0.2, 9.0], [0.1, -0.4, 0.25]])
    loss, grad, _ = loss_and_grad("geo_mean", lp, lp, adv)
    means = [(0.3 - 0.2) / 2, (0.1 - 0.4 + 0.25) / 3]
    assert loss == pytest.approx(-sum(means) / 2)
    # Every token of a sequence gets -mean(A) / length / sequences (tokens with A = 0 get 0).
    expected = t([[-means[0] / 4, -means[0] / 4, 0.0], [-means[1] / 6] * 3])
    assert torch.allclose(grad, expected)


@pytest.mark.parametrize("name", ["ppo", *NEW_LOSSES])
def test_masked_tokens_never_change_the_loss_nor_get_gradient(name):
    old, new, adv = probs(P_OLD), probs(P_NEW), ADV_PM
    results = []
    for garbage in (0.0, 7.0, -30.0):
        pad = torch.zeros(2, 3, dtype=F64)
        pad[0, 2] = garbage
        torch.manual_seed(0)  # clip_cov draws among its candidates
        results.append(loss_and_grad(name, old + pad, new - pad, adv + 3 * pad))
    for loss, grad, metrics in results:
        assert loss == pytest.approx(results[0][0])
        assert grad[0, 2] == 0.0
        assert metrics == pytest.approx(results[0][2])


@pytest.mark.parametrize("name", ["vanilla", *NEW_LOSSES])
def test_every_loss_returns_the_metrics_contract(name):
    loss, metrics = get_policy_loss_fn(name, {"dro_beta": 0.1})(
        probs(P_OLD), probs(P_NEW).requires_grad_(), ADV_PM, MASK
    )
    assert loss.dim() == 0 and loss.requires_grad
    assert set(metrics) == {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"}
    assert all(v.dim() == 0 and not v.requires_grad for v in metrics.values())


@given(split_batches(), st.sampled_from(["cispo", "sapo", "dppo_tv", "dppo_kl", "dro", "geo_mean"]))
@settings(max_examples=30)
def test_micro_batched_losses_equal_the_full_batch(batch, name):
    b, t_, seed, cuts = batch
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t_, generator=gen, dtype=F64) * 3 - 0.05  # log-probs of probabilities
    new = (old + torch.randn(b, t_, generator=gen, dtype=F64) * 0.2).clamp(max=-0.01)
    adv = torch.randn(b, t_, generator=gen, dtype=F64)
    mask = torch.rand(b, t_, generator=gen) < 0.7
    fn = get_policy_loss_fn(name, {"dro_beta": 0.1})

    def loss_fn(o, n, a, m, agg, **counts):
        return fn(o, n, a, m, loss_agg_mode=agg, **counts)[0]

    new.requires_grad_()
    assert_micro_batches_match_full_batch(loss_fn, (old, new, adv), 1, mask, cuts, "token-mean")


def test_each_loss_declares_the_options_it_reads_and_is_passed_only_those():
    reads = {name: POLICY_LOSSES.entry(name).extra_kwargs for name in POLICY_LOSSES.names()}
    assert reads["clip_cov"] == ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")
    assert reads["kl_cov"] == ("kl_cov_ratio", "ppo_kl_coef")
    assert reads["sapo"] == ("tau_pos", "tau_neg")
    assert reads["dro"] == ("dro_beta",)
    assert all(not reads[n] for n in ("ppo", "vanilla", "gspo", "gpg", "cispo", "geo_mean"))
    every = vars(load_config("reasoning/tiny_arith_ppo").algorithm.policy_loss_options)
    bound = get_policy_loss_fn("kl_cov", {**every, "ppo_kl_coef": 0.5})
    assert bound.keywords == {"kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.5}


ARITH, CARTPOLE = "reasoning/tiny_arith_ppo", "embodied/cartpole_ppo"


def test_an_option_the_selected_loss_does_not_read_is_refused():
    with pytest.raises(ConfigError) as caught:
        load_config(
            ARITH, ["algorithm.policy_loss=cispo", "algorithm.policy_loss_options.tau_pos=2"]
        )
    (line,) = str(caught.value).splitlines()
    assert line.startswith("algorithm.policy_loss_options.tau_pos: 2.0, but")
    assert "algorithm.policy_loss cispo does not read it (read by sapo)" in line
    config = load_config(
        ARITH, ["algorithm.policy_loss=sapo", "algorithm.policy_loss_options.tau_pos=2"]
    )
    assert config.algorithm.policy_loss_options.tau_pos == 2.0
    with pytest.raises(ConfigError, match="dro_beta: dro needs"):
        load_config(ARITH, ["algorithm.policy_loss=dro"])


@pytest.mark.parametrize("name", ["gspo", "geo_mean", "dppo_tv", "dppo_kl"])
def test_embodied_mode_refuses_the_losses_that_mean_nothing_on_one_step_sequences(name):
    with pytest.raises(ConfigError) as caught:
        load_config(CARTPOLE, [f"algorithm.policy_loss={name}"])
    assert str(caught.value).startswith(f"algorithm.policy_loss: {name} cannot run in embodied")
    assert load_config(ARITH, [f"algorithm.policy_loss={name}"]).algorithm.policy_loss == name


@pytest.mark.parametrize("name", ["vanilla", "gpg", "clip_cov", "kl_cov", "cispo", "sapo", "dro"])
def test_embodied_mode_takes_the_token_level_losses(name):
    beta = ["algorithm.policy_loss_options.dro_beta=0.1"] if name == "dro" else []
    assert load_config(CARTPOLE, [f"algorithm.policy_loss={name}", *beta]).algorithm.policy_loss


def test_verls_policy_loss_keys_load_onto_the_options(capsys):
    config = load_config(
        ARITH,
        [
            "+actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov",
            "+actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.002",
            "+actor_rollout_ref.actor.policy_loss.ppo_kl_coef=1.0",
        ],
    )
    options = config.algorithm.policy_loss_options
    assert config.algorithm.policy_loss == "kl_cov"
    assert (options.kl_cov_ratio, options.ppo_kl_coef) == (0.002, 1.0)
    config = load_config(
        ARITH,
        [
            "+actor_rollout_ref.actor.policy_loss.loss_mode=sapo",
            "+actor_rollout_ref.actor.tau_neg=2.5",
        ],
    )
    assert config.algorithm.policy_loss_options.tau_neg == 2.5
    said = capsys.readouterr().err
    assert (
        "actor_rollout_ref.actor.policy_loss.kl_cov_ratio (verl) is "
        "algorithm.policy_loss_options.kl_cov_ratio here" in said
    )
    assert "actor_rollout_ref.actor.tau_neg (verl) is algorithm.policy_loss_options.tau_neg" in said
