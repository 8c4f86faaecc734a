"""Nothing planted in a run folder runs: a pickle payload in a checkpoint's files is refused by
name, never unpickled, whatever reads it (resume, export, ``rlcore.load_policy``)."""

import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

from rlcore.config import ConfigError
from rlcore.placement import plan_for_config
from rlcore.runners.checkpoint import check_manifest, write_manifest
from rlcore.runners.files import write_replacing
from rlcore.runners.preflight import preflight
from rlcore.workers.files.shard_reader import UnsafeCheckpoint, check_metadata, load_shards_into
from tests import forked
from tests.runners.test_resume import config, run


class Payload:
    """Unpickled, it writes ``marker``: proof that a file ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def saved_shards(folder):
    """A ``torch.distributed.checkpoint`` of a small model and its AdamW state, as FSDP2 writes."""
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    weights, moments = get_state_dict(model, optimizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": weights, "optimizer": moments}, checkpoint_id=folder, no_dist=True)
    return model, optimizer


def test_a_payload_as_shard_metadata_runs_under_torch_and_is_refused_here(tmp_path):
    model, _ = saved_shards(tmp_path / "shards")
    # the genuine metadata reads, into equal tensors
    state = {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()}}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        load_shards_into(state, tmp_path / "shards", no_dist=True)
    for key, value in model.state_dict().items():
        assert torch.equal(state["model"][key], value)
    marker = tmp_path / "ran"
    (tmp_path / "shards" / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    # torch's own reader runs it (the hole this closes)...
    with pytest.raises(BaseException):  # noqa: B017 (torch's CheckpointException: no Metadata)
        dcp.load(state, checkpoint_id=tmp_path / "shards", no_dist=True)
    assert marker.read_text() == "ran"
    marker.unlink()
    # ...this one names the file and runs nothing
    with pytest.raises(UnsafeCheckpoint, match=r"shards/.metadata asks to load builtins.exec"):
        load_shards_into(state, tmp_path / "shards", no_dist=True)
    with pytest.raises(UnsafeCheckpoint, match=r"builtins.exec"):
        check_metadata(tmp_path / "shards")
    assert not marker.exists()


def test_a_payload_as_a_non_tensor_item_is_refused(tmp_path):
    marker = tmp_path / "ran"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(
            {"lr": 0.5, "trap": Payload(marker)}, checkpoint_id=tmp_path / "shards", no_dist=True
        )
        assert not marker.exists()
        state = {"lr": 0.0, "trap": None}
        with pytest.raises(UnsafeCheckpoint, match=r"the item trap of a checkpoint asks to run"):
            load_shards_into(state, tmp_path / "shards", no_dist=True)
        assert not marker.exists()
        del state["trap"]
        load_shards_into(state, tmp_path / "shards", no_dist=True)  # plain data still reads
    assert state["lr"] == 0.5


def test_files_the_manifest_does_not_list_and_links_are_refused(tmp_path):
    run(config(tmp_path, "runner.run_name=full"))
    checkpoint = tmp_path / "full" / "checkpoints" / "iter_000003"
    assert check_manifest(checkpoint) is None
    planted = checkpoint / "actor" / "shards" / ".metadata"
    planted.parent.mkdir()
    planted.write_bytes(pickle.dumps(Payload(tmp_path / "ran")))
    problem = check_manifest(checkpoint)
    assert problem == f"{planted} is not in the manifest (added after the checkpoint was written)"
    with pytest.raises(ConfigError, match=r"cannot be resumed: .*shards/.metadata is not in"):
        run(config(tmp_path, f"runner.resume_dir={checkpoint}"))
    shutil.rmtree(planted.parent)
    link = checkpoint / "actor" / "extra.pt"
    os.symlink(tmp_path / "elsewhere", link)
    assert check_manifest(checkpoint) == (
        f"{link} is a link, which no checkpoint holds: it is not followed"
    )
    assert not (tmp_path / "ran").exists()


def test_a_whole_weights_checkpoint_never_reads_a_planted_shards_folder(tmp_path):
    """Planted with a manifest made to list it: the torch backend recorded whole weights, so
    the shards folder is never read and the run resumes as it would have."""
    run(config(tmp_path, "runner.run_name=full"))
    checkpoint = tmp_path / "full" / "checkpoints" / "iter_000003"
    stopped = tmp_path / "stopped" / "checkpoints" / "iter_000003"
    shutil.copytree(checkpoint, stopped)
    planted = stopped / "actor" / "shards" / ".metadata"
    planted.parent.mkdir()
    planted.write_bytes(pickle.dumps(Payload(tmp_path / "ran")))
    (stopped / "manifest.json").unlink()
    write_manifest(stopped)
    resumed = run(config(tmp_path, f"runner.resume_dir={stopped}"))
    assert resumed["iterations"] == 6
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("planted", ["actor/trainer_rank0.pt", "rollout/rank0.pt", "env/rank0.pt"])
def test_a_payload_in_a_pt_file_the_manifest_lists_is_refused_in_one_line(tmp_path, planted):
    """An attacker who can write the folder can rewrite the manifest too: torch's restricted
    unpickler then refuses the payload, and the refusal names the file, as a bad input (no
    restart, no traceback)."""
    run(config(tmp_path, "runner.run_name=full"))
    stopped = tmp_path / "stopped" / "checkpoints" / "iter_000003"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "iter_000003", stopped)
    (stopped / planted).write_bytes(pickle.dumps(Payload(tmp_path / "ran")))
    (stopped / "manifest.json").unlink()
    write_manifest(stopped)
    with pytest.raises(ConfigError) as refused:
        run(config(tmp_path, f"runner.resume_dir={stopped}"))
    assert str(refused.value).startswith(
        f"{stopped / planted}: not loaded: it asks for more than plain data ("
    )
    assert "\n" not in str(refused.value) and "weights_only" not in str(refused.value)
    assert not (tmp_path / "ran").exists()


def test_a_run_folder_holding_a_link_is_refused_and_no_write_follows_one(tmp_path):
    run(config(tmp_path, "runner.run_name=full"))
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    config_file = tmp_path / "full" / "config.json"
    config_file.unlink()
    config_file.symlink_to(victim)
    more = ("runner.run_name=full", "runner.resume=auto", "runner.total_env_steps=512")
    with pytest.raises(ConfigError, match=r"config.json is a link \(to .*victim.txt\)"):
        run(config(tmp_path, *more))
    with pytest.raises(ConfigError, match=r"config.json is a link"):  # the dry run says it too
        preflight(config(tmp_path, *more), plan_for_config(config(tmp_path, *more)))
    assert victim.read_text() == "mine"
    # every run-folder file is written beside its place and renamed over it: a link is replaced
    write_replacing(config_file, "{}")
    assert not config_file.is_symlink() and config_file.read_text() == "{}"
    assert victim.read_text() == "mine"
    assert run(config(tmp_path, *more))["iterations"] == 8  # the folder is whole again
    assert json.loads(config_file.read_text())["runner"]["total_env_steps"] == 512


def test_a_second_run_on_a_folder_in_use_is_refused_at_once(tmp_path):
    run(config(tmp_path, "runner.run_name=full"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(tmp_path / 'full' / '.lock')!r}, 'r+')\n"
            "fcntl.flock(f, fcntl.LOCK_EX); f.seek(0); f.truncate(); f.write('4242'); f.flush()\n"
            "print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        more = ("runner.run_name=full", "runner.resume=auto", "runner.total_env_steps=512")
        with pytest.raises(ConfigError, match=r"full is in use by another run \(process 4242\)"):
            run(config(tmp_path, *more))
    finally:
        holder.kill()
        holder.wait()
    assert run(config(tmp_path, *more))["iterations"] == 8  # released with its process


def test_resume_auto_with_no_complete_checkpoint_refuses_instead_of_starting_over(tmp_path, capsys):
    same = ("runner.run_name=job", "runner.resume=auto")
    run(config(tmp_path, *same))
    checkpoints = tmp_path / "job" / "checkpoints"
    for damaged in ("iter_000003", "iter_000006"):
        weights = checkpoints / damaged / "actor" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-10])
    before = {p: p.read_bytes() for p in checkpoints.rglob("*") if p.is_file()}
    capsys.readouterr()
    with pytest.raises(ConfigError, match=r"resume=auto: no checkpoint of .*job is complete"):
        run(config(tmp_path, *same))
    err = capsys.readouterr().err
    assert "skipped checkpoint iter_000006" in err and "skipped checkpoint iter_000003" in err
    assert {p: p.read_bytes() for p in checkpoints.rglob("*") if p.is_file()} == before


def tampered_checkpoint(tmp_path, tamper):
    """A checkpoint folder (driver, a trainer file, FSDP2 shards) with its manifest, then
    changed by ``tamper``: the file it changed."""
    checkpoint = tmp_path / "run" / "checkpoints" / "iter_000002"
    (checkpoint / "actor").mkdir(parents=True)
    (checkpoint / "driver.json").write_text("{}")
    torch.save({"updates": 2}, checkpoint / "actor" / "trainer_rank0.pt")
    saved_shards(checkpoint / "actor" / "shards")
    write_manifest(checkpoint)
    return checkpoint, tamper(checkpoint / "actor")


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1  # (the same size: only its digest tells)
    path.write_bytes(bytes(data))
    return path


def _removed(path):
    path.unlink()
    return path


def _added(path):
    path.write_bytes(b"x")
    return path


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (lambda a: _flip_a_byte(a / "shards" / ".metadata"), "differs from the file that was"),
        (lambda a: _flip_a_byte(a / "shards" / "__0_0.distcp"), "differs from the file that was"),
        (lambda a: _removed(a / "trainer_rank0.pt"), "is missing"),
        (lambda a: _added(a / "extra.pt"), "is not in the manifest"),
    ],
    ids=["metadata", "tensors", "missing", "extra"],
)
def test_a_changed_missing_or_added_file_is_refused_on_resume_and_on_export(
    tmp_path, capsys, tamper, problem
):
    from rlcore.cli import main
    from rlcore.runners.checkpoint import find_checkpoint

    checkpoint, changed = tampered_checkpoint(tmp_path, tamper)
    with pytest.raises(ConfigError) as refused:
        find_checkpoint(str(checkpoint))  # runner.resume_dir=the checkpoint
    assert str(refused.value).startswith(f"runner.resume_dir: {checkpoint} cannot be resumed: ")
    assert f"{changed} {problem}" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="no complete checkpoint at"):  # the run's folder
        find_checkpoint(str(checkpoint.parent.parent))
    assert f"skipped checkpoint iter_000002: {changed} {problem}" in capsys.readouterr().err
    for args, key in [
        ([checkpoint], "export"),
        ([checkpoint.parent.parent, "--step", "2"], "--step 2"),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(["export", *map(str, args), str(tmp_path / "out")])
        assert exited.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"rlcore: config error: {key}: {checkpoint} cannot be exported: ")
        assert f"{changed} {problem}" in err[-1]
    assert not (tmp_path / "out").exists()


def test_a_lock_that_is_a_folder_is_named_with_the_fix(tmp_path):
    from rlcore.runners.files import lock_run_folder

    (tmp_path / "run" / ".lock").mkdir(parents=True)
    with pytest.raises(ConfigError) as refused:
        lock_run_folder(tmp_path / "run")
    assert str(refused.value) == (
        f"runner.run_name: {tmp_path / 'run' / '.lock'}, the run folder's lock file, cannot be "
        f"opened (a folder); a run makes it there itself: remove {tmp_path / 'run' / '.lock'}, "
        "or give another runner.run_name"
    )


def test_a_checkpoint_write_that_fails_leaves_the_earlier_one_whole_and_says_so(tmp_path):
    from rlcore.runners.checkpoint import written_atomically
    from rlcore.workers.files.state_files import CheckpointWriteError

    where = tmp_path / "checkpoints" / "iter_000002"
    with written_atomically(where) as folder:
        (folder / "driver.json").write_text("first")
    before = {p: p.read_bytes() for p in where.rglob("*")}
    with pytest.raises(CheckpointWriteError) as refused, written_atomically(where) as folder:
        (folder / "driver.json").write_text("second")
        raise OSError(27, "File too large", str(folder / "actor" / "model.safetensors"))
    message = str(refused.value)
    assert message.startswith(
        f"{where}.tmp/actor/model.safetensors: the checkpoint could not be written ([Errno 27] "
        "File too large); "
    )
    assert message.endswith(
        "(checkpoint iter_000002 was not written; the run stopped, and the checkpoints before "
        "it are as they were)"
    )
    assert {p: p.read_bytes() for p in where.rglob("*")} == before
    assert sorted(p.name for p in where.parent.iterdir()) == ["iter_000002"]  # no .tmp left
    with written_atomically(where) as folder:  # a whole one replaces it
        (folder / "driver.json").write_text("third")
    assert (where / "driver.json").read_text() == "third" and check_manifest(where) is None
    assert sorted(p.name for p in where.parent.iterdir()) == ["iter_000002"]  # nor an .old


def test_a_run_past_the_file_size_limit_stops_in_one_line_naming_the_file(tmp_path):
    """RLIMIT_FSIZE (ulimit -f) below a checkpoint's weights: the run exits with status 2 and
    one line naming the file, and lists no checkpoint (none could be loaded)."""
    import resource

    limit = 16 * 1024  # CartPole's weights take 19 kB

    args = [
        "env.num_envs=4",
        "runner.rollout_steps=16",
        "runner.total_env_steps=64",
        "actor.ppo_mini_batch_size=32",
        "runner.checkpoint_every=1",
        "env.solved_threshold=null",
        "runner.progress=false",
        "logger.tensorboard=false",
        f"runner.output_dir={tmp_path}",
        "runner.run_name=r",
    ]
    main = str(Path(__file__).resolve().parents[2] / "examples" / "embodied" / "main.py")
    done = forked.run(
        [sys.executable, main, *args],
        capture_output=True,
        text=True,
        timeout=300,
        rlimits={resource.RLIMIT_FSIZE: (limit, resource.RLIM_INFINITY)},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    weights = tmp_path / "r" / "checkpoints" / "iter_000001.tmp" / "actor" / "model.safetensors"
    assert last.startswith(f"rlcore: config error: {weights}: the checkpoint could not be")
    assert f"a file-size limit of {limit} bytes (ulimit -f)" in last
    assert "Traceback" not in done.stderr
    assert list((tmp_path / "r" / "checkpoints").iterdir()) == []
