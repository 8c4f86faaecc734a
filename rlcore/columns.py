"""The batch's column names, declared once: what each step writes and each loss reads.

A batch is a ``TensorDict`` of ``[B, ...]`` rows (reasoning: responses; embodied: envs, with
``[N, T]`` steps). Both modes use the same name for the same thing, from the step that writes a
column to the formula that reads it; write ``batch[OLD_LOG_PROBS]``, not the string. No column is
saved in a checkpoint or written as a metric under these names (metrics have their own).
"""

from __future__ import annotations

# What the PPO losses read (``rlcore.algorithms.loss.PPO_READS``).
OLD_LOG_PROBS = "old_log_probs"
"""``[B, T]`` log-probs of the taken tokens / actions under the policy before this update: the
actor's recomputed ones, or the rollout's where the actor does not recompute (embodied)."""
ADVANTAGES = "advantages"
"""``[B, T]`` the estimator's advantages (whitened with ``algorithm.normalize_advantages``)."""
RETURNS = "returns"
"""``[B, T]`` the value targets the estimator returns with the advantages."""
VALUES = "values"
"""``[B, T]`` the value model's (or value head's) estimates before this update."""
LOSS_MASK = "loss_mask"
"""``[B, T]`` 1 where a token / step counts in the losses and estimators: the model's own
response tokens (tool output is context), the valid steps of an env's row (embodied)."""
REF_LOG_PROBS = "ref_log_probs"
"""``[B, T]`` log-probs under the reference policy (the KL loss and the in-reward penalty)."""
ROLLOUT_LOG_PROBS = "rollout_log_probs"
"""``[B, T]`` log-probs the rollout engine recorded while sampling (rollout correction)."""
ROUTED_EXPERTS = "routed_experts"
"""``[B, P + R, layers, k]`` int16: the experts each token of ``input_ids`` was routed to in each
MoE layer while the rollout generated it (routing replay; -1 where it recorded none: padding, the
response's last token)."""
PIXEL_VALUES = "pixel_values"
"""``[B, images, C, H, W]`` float: the images of each row's prompt as the model's image processor
makes them (resized, normalised), in the order of the prompt's image placeholders; a
vision-language model's every pass over ``input_ids`` splices their features in at those
placeholders (``rlcore.models.forward``)."""
IMAGE_GRID = "image_grid_thw"
"""``[B, images, 3]`` long, beside ``pixel_values`` for a model whose images are grids of patches
of any size (Qwen2-VL's family): each image's (frames, rows, columns) of patches; its
``pixel_values`` are then ``[B, images, patches, D]``, each image's ``frames x rows x columns``
patches first and zeros after (the batch's largest image sets ``patches``)."""
IMAGE_COLUMNS = (PIXEL_VALUES, IMAGE_GRID)
"""A row's images, whatever their count: no token column (trimming and packing leave them)."""
ROLLOUT_IS_WEIGHTS = "rollout_is_weights"
"""``[B, T]`` rollout correction's importance weights on the policy loss's tokens."""
SUM_PI_SQUARED = "sum_pi_squared"
"""``[B, T]`` the sum over the vocabulary of the squared token probabilities (token baselines)."""

# Reasoning: the sequences (``rlcore.data.sequences``).
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
POSITION_IDS = "position_ids"
RESPONSES = "responses"
"""``[B, R]`` the response tokens (right-padded)."""
RESPONSE_MASK = "response_mask"
"""``[B, R]`` 1 on every response token, the model's and the tools' (``LOSS_MASK`` keeps the
model's)."""
INDEX = "index"
"""``[B]`` the group (prompt) each response belongs to."""
ROLLOUT_VERSIONS = "rollout_versions"
"""``[B, R]`` the weight version that sampled each token (asynchronous runs)."""

# Reasoning: the reward's rows (``rlcore.rewards.worker``), and what estimators read of them.
SCORES = "scores"
"""``[B]`` the reward's score of each response."""
CORRECT = "correct"
"""``[B]`` the verdicts the accuracy counts (where ``JUDGED``)."""
JUDGED = "judged"
"""``[B]`` whether a response got a verdict."""
OVERLONG_PENALTY = "overlong_penalty"
"""``[B]`` DAPO's overlong penalty in the score (``reward.overlong_buffer``)."""
REWARD_COMPONENTS = "reward_components"
"""``[B, K]`` the reward's components, GDPO's ``algorithm.gdpo_reward_keys``."""
REWARD_COMPONENT_WEIGHTS = "reward_component_weights"
"""``[K]`` their weights: not a column, passed to the estimator with ``REWARD_COMPONENTS``."""
REWARD_BASELINES = "reward_baselines"
"""``[B]`` the greedy responses' rewards (ReMax's baselines)."""
UNPARSED = "unparsed"
"""``[B]`` no answer could be read from the response."""
TIMED_OUT = "timed_out"
"""``[B]`` the reward ran out of time on the response."""
MODEL_SCORES = "model_scores"
"""``[B]`` a reward model's scores (NaN where none scored)."""
JUDGE_UNPARSED = "judge_unparsed"
"""``[B]`` the judge's answer could not be read."""
JUDGE_OUTPUTS = "judge_outputs"
"""``[B]`` what the judge answered (text)."""
REMOTE_FAILURES = "remote_failures"
"""``[B]`` failed calls to a remote reward."""
ANSWERS = "answers"
"""``[B]`` the reference answers (text), from the prompts."""
TRAJECTORIES = "trajectories"
"""``[B]`` multi-turn runs: each response's turns, tool calls and how it stopped."""

# Embodied: the steps of each env's row (``rlcore.workers.embodied.embodied_rollout``).
OBS = "obs"
ACTIONS = "actions"
REWARDS = "rewards"
TERMINATED = "terminated"
TRUNCATED = "truncated"
LAST_OBS = "last_obs"
"""``[N, ...]`` the observation after a row's last step."""
LAST_VALUE = "last_value"
"""``[N]`` V(``LAST_OBS``), where an unfinished row bootstraps."""
