"""tools.notebook_runtime: atomic JSON, stable hashes, package versions, model commits, failure records."""

import hashlib
import json
import os

import pytest

from tools import notebook_runtime
from tools.notebook_runtime import failure_record, hash_ids, package_version, resolve_model_commit, save_json


def test_save_json_round_trip_keeps_non_ascii(tmp_path):
    target = tmp_path / "deep" / "er" / "evidence.json"
    obj = {"说明": "组相对策略优化", "values": [1, 2.5, None, True], "nested": {"a": "b"}}
    returned = save_json(target, obj)
    assert returned == target
    text = target.read_text(encoding="utf-8")
    assert "组相对策略优化" in text and "\\u" not in text
    assert text == json.dumps(obj, ensure_ascii=False, indent=2) + "\n"
    assert json.loads(text) == obj
    assert sorted(p.name for p in target.parent.iterdir()) == ["evidence.json"]


def test_save_json_unserialisable_leaves_old_file(tmp_path):
    target = tmp_path / "evidence.json"
    save_json(target, {"run": 1})
    before = target.read_bytes()
    with pytest.raises(TypeError):
        save_json(target, {"run": 2, "bad": object()})
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["evidence.json"]


def test_save_json_failed_rename_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "evidence.json"
    save_json(target, {"run": 1})
    before = target.read_bytes()

    def broken_replace(src, dst):
        raise OSError("disk went away")

    monkeypatch.setattr(notebook_runtime.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk went away"):
        save_json(target, {"run": 2})
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["evidence.json"]


def test_save_json_file_mode_is_not_private(tmp_path):
    target = save_json(tmp_path / "x.json", [])
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_hash_ids_pinned_digests():
    # Encoding: for each item, 8-byte big-endian UTF-8 length, then the UTF-8 bytes.
    assert hash_ids([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert hash_ids(["ab", "c"]) == "601d5476e2ccfe2c87a2bba7a322659734a05749d5b5aa781f513e4912db0d5f"
    expected = hashlib.sha256(b"".join(len(s.encode()).to_bytes(8, "big") + s.encode() for s in ["组", "x"]))
    assert hash_ids(["组", "x"]) == expected.hexdigest()


def test_hash_ids_order_and_boundaries_matter():
    assert hash_ids(["ab", "c"]) != hash_ids(["a", "bc"])
    assert hash_ids(["a", "b"]) != hash_ids(["b", "a"])
    assert hash_ids(["a", ""]) != hash_ids(["a"])
    assert hash_ids(("x", "y")) == hash_ids(iter(["x", "y"])) == hash_ids(["x", "y"])
    with pytest.raises(TypeError):
        hash_ids("ab")
    with pytest.raises(TypeError):
        hash_ids(["a", 1])


def test_package_version():
    import torch

    assert package_version("torch") == torch.__version__
    assert package_version("grpo-course-no-such-package") is None


def _make_checkpoint(folder, files):
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


def test_resolve_model_commit_local_content_hash(tmp_path):
    files = {"config.json": b"{}", "model.safetensors": b"\x00\x01weights", "sub/tokenizer.json": b"tok"}
    first = _make_checkpoint(tmp_path / "a", files)
    second = _make_checkpoint(tmp_path / "b", dict(reversed(list(files.items()))))  # other creation order
    commit, source = resolve_model_commit(str(first), "main", local_files_only=True)
    assert source == "local" and len(commit) == 64 and int(commit, 16) >= 0
    assert resolve_model_commit(second, None, local_files_only=False) == (commit, "local")
    (second / "model.safetensors").write_bytes(b"\x00\x01weightz")
    assert resolve_model_commit(second, None, True)[0] != commit
    third = _make_checkpoint(
        tmp_path / "c", {"config.json": b"{}", "model2.safetensors": b"\x00\x01weights", "sub/tokenizer.json": b"tok"}
    )
    assert resolve_model_commit(third, None, True)[0] != commit  # a renamed file changes the hash


def _fake_hub_cache(root, model_id, refs):
    repo = root / ("models--" + model_id.replace("/", "--"))
    for name, commit in refs.items():
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / name).write_text(commit)  # huggingface_hub writes the bare commit, no newline
        (repo / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
        (repo / "snapshots" / commit / "config.json").write_text("{}")
    return root


MAIN = "7ae557604adf67be50417f59c2c2f167def9a775"
V1 = "0123456789abcdef0123456789abcdef01234567"


def test_resolve_model_commit_from_cache(tmp_path, monkeypatch):
    cache = _fake_hub_cache(tmp_path / "hub", "Qwen/Qwen2.5-0.5B-Instruct", {"main": MAIN, "v1": V1})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)  # no local folder called Qwen/...
    assert resolve_model_commit("Qwen/Qwen2.5-0.5B-Instruct", "main", local_files_only=True) == (MAIN, "cache")
    assert resolve_model_commit("Qwen/Qwen2.5-0.5B-Instruct", None, local_files_only=True) == (MAIN, "cache")
    assert resolve_model_commit("Qwen/Qwen2.5-0.5B-Instruct", "v1", local_files_only=True) == (V1, "cache")
    # a revision that is itself a cached commit
    assert resolve_model_commit("Qwen/Qwen2.5-0.5B-Instruct", V1, local_files_only=True) == (V1, "cache")
    # offline by environment, even without local_files_only: no network attempt, the cache answers
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model_commit("Qwen/Qwen2.5-0.5B-Instruct", "main", local_files_only=False) == (MAIN, "cache")


def test_resolve_model_commit_clear_error(tmp_path, monkeypatch):
    cache = _fake_hub_cache(tmp_path / "hub", "Qwen/Qwen2.5-0.5B-Instruct", {"main": MAIN})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError) as missing_revision:
        resolve_model_commit("Qwen/Qwen2.5-0.5B-Instruct", "v9", local_files_only=True)
    message = str(missing_revision.value)
    assert "Qwen/Qwen2.5-0.5B-Instruct" in message and "v9" in message and str(cache) in message
    assert "main" in message  # lists what the cache does hold
    with pytest.raises(RuntimeError, match="not-cached/model"):
        resolve_model_commit("not-cached/model", "main", local_files_only=True)
    # a ref whose snapshot folder is gone is an incomplete download, not a commit to report
    (cache / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / MAIN / "config.json").unlink()
    (cache / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / MAIN).rmdir()
    with pytest.raises(RuntimeError, match="incomplete"):
        resolve_model_commit("Qwen/Qwen2.5-0.5B-Instruct", "main", local_files_only=True)


def _fail_deep():
    def inner():
        return {}["missing key"]

    return inner()


def test_failure_record(tmp_path):
    try:
        _fail_deep()
    except KeyError as error:
        record = failure_record("revision_and_tokenization", error)
    assert record["stage"] == "revision_and_tokenization"
    assert record["error_type"] == "KeyError"
    assert record["message"] == "'missing key'"
    lines = record["traceback"]
    assert isinstance(lines, list) and all(isinstance(line, str) and "\n" not in line for line in lines)
    assert 0 < len(lines) <= 12
    assert lines[-1] == "KeyError: 'missing key'"
    assert any("in inner" in line for line in lines)
    assert json.loads(save_json(tmp_path / "f.json", record).read_text(encoding="utf-8")) == record
    short = failure_record("s", ValueError("没有回答词元"), max_lines=1)
    assert short["traceback"] == ["ValueError: 没有回答词元"] and short["message"] == "没有回答词元"
