"""What a run refuses, the dry run refuses: every bad input the runners meet (model folders, prompt
files, the custom reward, the env, the checkpoint to resume) is refused by the runner itself and,
with the same line, by ``runner.dry_run=true`` (through ``preflight``), before anything starts."""

import json
import shutil

import pytest

from rlcore.cli import run_entry_point
from rlcore.config import load_config
from rlcore.config.errors import ConfigError
from rlcore.data.prompts import DataError
from rlcore.placement import plan_for_config
from rlcore.runners.supervisor import build_runner
from tests.lm_fixtures import TINY, once

ARITH, CARTPOLE = "reasoning/tiny_arith_ppo", "embodied/cartpole_ppo"


def write(path, text):
    path.write_text(text)
    return path


def damaged_copy(model, where, damage):
    """A copy of the model folder ``model`` at ``where`` with ``damage`` done to it."""
    shutil.copytree(model, where)
    if damage == "no weights":
        (where / "model.safetensors").unlink()
    elif damage == "garbage weights":
        (where / "model.safetensors").write_bytes(b"\x00garbage" * 1000)
    elif damage == "sliding window":  # every layer a sliding window's (Qwen2's own key)
        settings = json.loads((where / "config.json").read_text())
        layers = settings["num_hidden_layers"]
        settings.update(use_sliding_window=True, sliding_window=8, max_window_layers=0)
        settings["layer_types"] = ["sliding_attention"] * layers
        write(where / "config.json", json.dumps(settings))
    elif damage == "no eos":  # neither eos nor pad: nothing to end or pad responses with
        settings = json.loads((where / "tokenizer_config.json").read_text())
        settings.update(eos_token=None, pad_token=None)
        write(where / "tokenizer_config.json", json.dumps(settings))
    else:  # no tokenizer: transformers would build an empty one that encodes nothing
        (where / "tokenizer.json").unlink()
    return where


def bad_inputs(tmp_path, model):
    """``(config, overrides, the line both must print)``: one per refusal the runners raise;
    ``model`` is a good model folder to damage copies of."""
    (tmp_path / "empty_dir").mkdir()
    rows = write(tmp_path / "rows.jsonl", json.dumps({"question": "1+1?", "answer": "#### 2"}))
    no_field = write(tmp_path / "nofield.jsonl", json.dumps({"q": "1+1?", "answer": "#### 2"}))
    no_number = write(tmp_path / "nonum.jsonl", json.dumps({"question": "?", "answer": "two"}))
    write(tmp_path / "rows.csv", "question,answer\n")
    empty = write(tmp_path / "empty.jsonl", "")
    # 12 prompts, 6 of them far past data.max_prompt_length (48 tokens): 6 usable, fewer than the
    # batch of 8 (TINY), though the file holds 12
    problems = [(f"{a}+{a}?", a + a) for a in range(6)] + [("12+34? " * 60, 46)] * 6
    mixed = write(
        tmp_path / "mixed.jsonl",
        "\n".join(json.dumps({"question": q, "answer": f"#### {a}"}) for q, a in problems),
    )
    write(tmp_path / "reward.py", "def other(response, answer):\n    return 0.0\n")
    custom = ["reward.kind=custom"]
    run = tmp_path / "finished_run"
    (run / "checkpoints").mkdir(parents=True)
    write(tmp_path / "broken.py", "def score(response, answer)\n    return 1.0\n")
    (tmp_path / "damaged_model").mkdir()
    write(tmp_path / "damaged_model" / "config.json", "{not json")
    (tmp_path / "out" / "taken").mkdir(parents=True)  # the harness's runner.output_dir
    write(tmp_path / "out" / "taken" / "config.json", "{}")
    write(tmp_path / "out" / "a_file", "")
    damaged = {
        d: damaged_copy(model, tmp_path / d.replace(" ", "_"), d)
        for d in ("no weights", "garbage weights", "no tokenizer", "no eos", "sliding window")
    }
    short = tmp_path / "short_model"  # a model of 40 positions
    shutil.copytree(model, short)
    described = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**described, "max_position_embeddings": 40}))
    return [
        (
            ARITH,
            ["actor.model.path=/no/such/model", "warmup.steps=0"],
            "actor.model.path: /no/such/model is not a directory",
        ),
        (
            ARITH,
            [f"actor.model.path={tmp_path / 'empty_dir'}", "warmup.steps=0"],
            "has no config.json, so it is not a model folder",
        ),
        (ARITH, ["critic.model_path=/no/critic"], "critic.model_path: /no/critic is not a"),
        (
            ARITH,
            ["data.train_files=[/no/train.jsonl]"],
            "data.train_files: /no/train.jsonl does not exist",
        ),
        (ARITH, [f"data.train_files=[{tmp_path / 'rows.csv'}]"], "is neither .parquet nor .jsonl"),
        (ARITH, [f"data.val_files=[{empty}]"], "data.val_files: " + str(empty) + " is empty"),
        (ARITH, [f"data.train_files=[{no_field}]"], "has no field 'question' (data.prompt_key)"),
        (
            ARITH,
            [f"data.train_files=[{mixed}]"],
            "data.train_files: 6 usable prompts, fewer than data.train_batch_size=8; give more "
            "prompts or a smaller batch (or a larger data.max_prompt_length, which dropped 6)",
        ),
        (ARITH, [f"data.train_files=[{no_number}]"], "has no number after '####'"),
        (
            ARITH,
            [f"data.train_files=[{rows}]", "data.answer_key=solution"],
            "has no field 'solution' (data.answer_key)",
        ),
        (
            ARITH,
            [*custom, "reward.rules.custom_fn=/no/reward.py:score"],
            "reward.rules.custom_fn: /no/reward.py does not exist",
        ),
        (
            ARITH,
            [*custom, f"reward.rules.custom_fn={tmp_path / 'reward.py'}:score"],
            "defines no function 'score'",
        ),
        (ARITH, [*custom, "reward.rules.custom_fn=reward.py"], "is not 'path/to/file.py:function'"),
        (
            ARITH,
            [*custom, f"reward.rules.custom_fn={tmp_path / 'broken.py'}:score"],
            "broken.py cannot be loaded: SyntaxError: expected ':' (line 1)",
        ),
        (
            ARITH,
            [f"actor.model.path={tmp_path / 'damaged_model'}", "warmup.steps=0"],
            "config.json is not readable JSON",
        ),
        (
            ARITH,
            [f"actor.model.path={damaged['no weights']}", "warmup.steps=0"],
            "no_weights holds no weights (none of model.safetensors, ",
        ),
        (
            ARITH,
            [f"critic.model_path={damaged['garbage weights']}"],
            "model.safetensors is not a readable safetensors file",
        ),
        (
            ARITH,
            [f"actor.model.path={damaged['no tokenizer']}", "warmup.steps=0"],
            "no_tokenizer holds no tokenizer (none of tokenizer.json, ",
        ),
        (
            ARITH,
            [f"runner.output_dir={tmp_path / 'out' / 'a_file' / 'runs'}"],
            "a_file is a file, so",
        ),
        (CARTPOLE, [f"runner.output_dir={tmp_path / 'out' / 'a_file'}"], "a_file is a file, so"),
        (CARTPOLE, ["env.id=CartPol-v1"], "env.id: no environment 'CartPol-v1'"),
        (CARTPOLE, ["env.id=tests.runners.nowhere:Env"], "env.id:"),
        (
            CARTPOLE,
            ["env.id=Pendulum-v1", "env.vector_mode=native"],
            "env.vector_mode: 'Pendulum-v1' has no native vector version",
        ),
        (
            CARTPOLE,
            ["runner.resume_dir=/no/run"],
            "runner.resume_dir: no complete checkpoint at /no/run",
        ),
        (
            CARTPOLE,
            [f"runner.resume_dir={run}"],
            f"runner.resume_dir: no complete checkpoint at {run}",
        ),
        (
            CARTPOLE,
            ["runner.run_name=taken"],
            "already holds a run; pick another run_name, or continue that run with runner.resume",
        ),
        (ARITH, ["runner.run_name=taken"], "already holds a run"),
        (
            ARITH,
            ["data.max_prompt_length=500", "data.max_response_length=100"],
            "500 + 100 = 600 tokens, more than the 512 positions of the tiny model",
        ),
        (
            ARITH,
            [f"actor.model.path={short}", "warmup.steps=0"],
            f"48 + 8 = 56 tokens, more than the 40 positions of actor.model.path {short}",
        ),
        (CARTPOLE, ["runner.run_name=a_file"], "a_file is a file, not a folder for the run"),
        (
            CARTPOLE,
            ["env.id=tests.runners.corridor:SmallPixels"],
            "observes 20x20 images, smaller than the CNN policy's minimum of 36x36",
        ),
        (
            ARITH,
            [f"actor.model.path={damaged['no eos']}", "warmup.steps=0"],
            "its tokenizer has neither an eos token nor a pad token",
        ),
        (
            ARITH,
            [
                f"actor.model.path={damaged['sliding window']}",
                "warmup.steps=0",
                "rollout.hf.static_cache=true",
            ],
            "rollout.hf.static_cache: Qwen2ForCausalLM has layers of kinds ['sliding_attention']",
        ),
        (
            ARITH,
            [
                f"actor.model.path={model}",
                "warmup.steps=0",
                "actor.model.lora.rank=4",
                "actor.model.lora.target_modules=[q_proj,c_attn]",
            ],
            "actor.model.lora.target_modules: c_attn not in the model (Qwen2ForCausalLM), whose "
            "layers LoRA can adapt are named down_proj, embed_tokens, gate_proj, k_proj, ",
        ),
    ]


def runner_refusal(config_name, args):
    """What the run itself raises (its model preparation, then its driver), started without the
    entry point's preflight."""
    config = load_config(config_name, args)
    with pytest.raises((ConfigError, DataError)) as refused:
        build_runner(config, plan_for_config(config)).close()
    return str(refused.value)


def test_every_input_the_runner_refuses_the_dry_run_refuses_first(tiny_lm, tmp_path, capsys):
    _, dirs = tiny_lm
    ours = {ARITH: [*TINY, f"warmup.cache_dir={dirs.actor.parent}"], CARTPOLE: []}
    cases = bad_inputs(tmp_path, dirs.actor)
    assert len(cases) >= 15
    for config, overrides, line in cases:
        args = once(*ours[config], f"runner.output_dir={tmp_path / 'out'}", *overrides)
        assert line in runner_refusal(config, args), overrides
        with pytest.raises(SystemExit) as stopped:
            run_entry_point(config, [*args, "runner.dry_run=true"])
        assert stopped.value.code == 2, overrides
        refused = capsys.readouterr().err.splitlines()
        assert any(x.startswith("rlcore: config error: ") and line in x for x in refused), overrides


def test_a_resume_with_another_config_is_refused_by_the_dry_run(tmp_path, capsys):
    args = [
        "runner.total_env_steps=1024",
        "runner.checkpoint_every=1",
        "runner.progress=false",
        f"runner.output_dir={tmp_path}",
        "runner.run_name=first",
        "logger.tensorboard=false",
    ]
    assert run_entry_point(CARTPOLE, args) == 0
    changed = [*args, f"runner.resume_dir={tmp_path / 'first'}", "algorithm.gamma=0.9"]
    line = "trained with other values of algorithm.gamma"
    assert line in runner_refusal(CARTPOLE, changed)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        run_entry_point(CARTPOLE, [*changed, "runner.dry_run=true"])
    assert line in capsys.readouterr().err
