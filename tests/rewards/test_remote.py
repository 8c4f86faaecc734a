"""``reward.kind: remote`` against a local HTTP server this test starts: the contract, batching,
retries, deadlines, malformed answers, the failure policy and the start-up check."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.config import ConfigError, load_config, replace_keys
from rlcore.placement import plan_for_config
from rlcore.rewards import remote
from rlcore.rewards.remote import RemoteRewardError, RemoteScorer, check_reachable
from rlcore.runners.preflight import preflight
from tests.rewards.test_rules import sectioned


class Service:
    """A reward server on a free loopback port; ``answer(items, n)`` gives the n-th request's
    (status, body); every request's items are kept in ``seen``."""

    def __init__(self, answer):
        self.seen, self.lock = [], threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                items = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["items"]
                with service.lock:
                    service.seen.append(items)
                    n = len(service.seen)
                status, body = answer(items, n)
                self.send_response(status)
                self.end_headers()
                self.wfile.write(body if isinstance(body, bytes) else json.dumps(body).encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/score"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def settings(url, **changes):
    base = dict(
        url=url,
        remote_batch_size=2,
        remote_concurrency=2,
        remote_timeout_s=5.0,
        remote_retries=2,
        on_error="raise",
        score_range=(-1e4, 1e4),
    )
    return sectioned(base | changes)


def items(n):
    return [
        {"prompt": f"p{i}", "response": "x" * i, "answer": str(i), "data_source": None}
        for i in range(n)
    ]


def lengths(items, n):  # the score of a response: its length
    return 200, {"scores": [len(it["response"]) for it in items], "extra": "allowed"}


def test_scores_come_back_in_order_over_batched_concurrent_requests(service):
    s = service(lengths)
    scorer = RemoteScorer(settings(s.url))
    answer = scorer.ask(items(5))
    assert answer.scores == [0.0, 1.0, 2.0, 3.0, 4.0] and answer.failed == 0
    assert sorted(len(batch) for batch in s.seen) == [1, 2, 2]  # remote_batch_size 2
    assert answer.correct is None  # no verdicts given: no accuracy
    verdicts = service(lambda it, n: (200, {"scores": [1] * len(it), "correct": [True] * len(it)}))
    assert RemoteScorer(settings(verdicts.url)).ask(items(3)).correct == [True] * 3


def test_5xx_is_tried_again_with_backoff_and_a_4xx_or_malformed_answer_is_not(service, monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_S", 0.1)  # (0.5 s in a run)
    flaky = service(lambda it, n: (503, {}) if n <= 2 else lengths(it, n))
    start = time.monotonic()
    assert RemoteScorer(settings(flaky.url)).ask(items(2)).scores == [0.0, 1.0]
    assert len(flaky.seen) == 3 and time.monotonic() - start >= 0.3  # waited 0.1 s, then 0.2 s
    for answer, says in [
        ((400, {"error": "bad"}), "status 400"),
        ((200, b"<html>"), "not JSON"),
        ((200, {"scores": [1.0]}), "1 scores for 2 items"),
        ((200, {"scores": [1.0, float("nan")]}), "score 1 is nan, not a finite number"),
        ((200, {"scores": [1, 2], "correct": [1, 0]}), "one true or false per item"),
    ]:
        bad = service(lambda it, n, answer=answer: answer)
        with pytest.raises(RemoteRewardError, match=says) as raised:
            RemoteScorer(settings(bad.url)).ask(items(2))
        assert len(bad.seen) == 1, says  # not tried again
        assert bad.url in str(raised.value) and "\n" not in str(raised.value)


def test_a_request_past_its_deadline_fails_after_its_retries(service):
    slow = service(lambda it, n: (time.sleep(1.0), lengths(it, n))[1])
    with pytest.raises(
        RemoteRewardError, match=r"no whole answer within reward.remote.timeout_s=0.2"
    ):
        RemoteScorer(settings(slow.url, remote_timeout_s=0.2, remote_retries=1)).ask(items(1))
    assert len(slow.seen) == 2  # the first try and one retry


def test_on_error_zero_scores_a_failed_requests_items_0_and_counts_them(service):
    down = service(lambda it, n: (500, {}))
    answer = RemoteScorer(settings(down.url, on_error="zero", remote_retries=0)).ask(items(3))
    assert answer.scores == [0.0, 0.0, 0.0] and answer.failed == 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_service_is_refused_before_the_start_with_one_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/score"  # nothing listens there
    with pytest.raises(
        ConfigError, match=r"reward.remote.url: .* is unreachable .*start the reward"
    ):
        check_reachable(url, timeout_s=2.0)
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [f"runner.output_dir={tmp_path}", "reward.kind=remote", f"reward.remote.url={url}"],
    )
    with pytest.raises(ConfigError, match=r"reward.remote.url: .* is unreachable"):
        preflight(config, plan_for_config(config))  # what the dry run runs too
    with pytest.raises(ConfigError, match=r"reward.remote.url: None, but reward.kind is remote"):
        load_config("reasoning/tiny_arith_ppo", ["reward.kind=remote"])


def test_the_reward_worker_sends_each_rows_prompt_response_and_answer(tiny_lm, service):
    """The reward component decodes the prompt (its left padding dropped) and the response
    (up to its mask), sends them with the answer, and takes the scores as the rows' rewards."""
    from rlcore.models.lm import load_tokenizer
    from rlcore.rewards.worker import RewardWorker

    config, dirs = tiny_lm
    s = service(lambda it, n: (200, {"scores": [float(len(x["response"])) for x in it]}))
    config = replace_keys(config, {"reward.kind": "remote", "reward.remote.url": s.url})
    worker = RewardWorker(None, config, dirs.actor)
    tok = load_tokenizer(dirs.actor)
    prompt = tok("12+30=", add_special_tokens=False)["input_ids"]
    response = tok(" 42 #### 42", add_special_tokens=False)["input_ids"]
    pad = tok.pad_token_id
    input_ids = torch.tensor([[pad, pad, *prompt, *response, pad]])
    batch = TensorDict(
        {
            "input_ids": input_ids,
            "attention_mask": (input_ids != pad).long(),
            "responses": torch.tensor([[*response, pad]]),
            "response_mask": torch.tensor([[1] * len(response) + [0]]),
        },
        batch_size=[1],
    )
    batch["answers"] = NonTensorStack("42")
    try:
        rows = worker.score(batch)
    finally:
        worker.close()
    (sent,) = s.seen[0]
    assert sent["prompt"] == tok.decode(prompt) and sent["response"] == tok.decode(response)
    assert (sent["answer"], sent["data_source"]) == ("42", None)
    assert rows["scores"].tolist() == [float(len(tok.decode(response)))]
    assert rows["remote_failures"].tolist() == [0.0] and not rows["judged"].any()


def test_reward_sources_route_each_row_to_its_kind_in_one_batch(tiny_lm, service):
    """reward.sources: rows of data source 'svc' go to the service, the others to the rule."""
    from rlcore.models.lm import load_tokenizer
    from rlcore.rewards.worker import RewardWorker

    config, dirs = tiny_lm
    s = service(lambda it, n: (200, {"scores": [5.0] * len(it)}))
    keys = {"reward.kind": "gsm8k", "reward.sources": {"svc": "remote"}, "reward.remote.url": s.url}
    worker = RewardWorker(None, replace_keys(config, keys), dirs.actor)
    tok = load_tokenizer(dirs.actor)
    response = tok(" #### 42", add_special_tokens=False)["input_ids"]
    prompt = tok("What is 40 + 2?", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + response] * 3)
    batch = TensorDict(
        {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "responses": torch.tensor([response] * 3),
            "response_mask": torch.ones(3, len(response), dtype=torch.long),
        },
        batch_size=[3],
    )
    batch["answers"] = NonTensorStack("42", "42", "41")
    batch["sources"] = NonTensorStack("svc", None, "other")
    try:
        rows = worker.score(batch)
    finally:
        worker.close()
    assert [item["data_source"] for items in s.seen for item in items] == ["svc"]
    assert rows["scores"].tolist() == [5.0, 1.0, 0.0]  # the service's; gsm8k right; wrong
    assert rows["remote_failures"].tolist() == [0.0, 0.0, 0.0]
