"""``python -m autograde.pipeline merge-shards``: the results of ``autograde --shard k/N`` runs (each a folder under
``<course>/shards/``, written by ``save_shard_results``) merged into the course gradebook, one writer."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from autograde.grpo_grader.course import GradingPipeline
from autograde.grpo_grader.gradebook import merge
from autograde.grpo_grader.outcomes import AssignmentResult, NotebookResult


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """ "k/N" (1 <= k <= N) -> (k, N); None or "" -> None."""
    if not text:
        return None
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise SystemExit(f"SHARD 应写成 k/N，例如 2/8（got {text!r}）") from None
    if not 1 <= k <= n:
        raise SystemExit(f"SHARD 应满足 1 <= k <= N（got {text!r}）")
    return k, n


def shard_folder(settings: GradingPipeline, shard: tuple[int, int]) -> Path:
    return settings.dir("shards") / f"{shard[0]}-of-{shard[1]}"


def save_shard_results(folder: Path, results: list[AssignmentResult]) -> None:
    """A shard's results as plain files: the staged folders and one JSON line per assignment result."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for result in results:
        if result.staged:
            target = folder / "staged" / result.learner / result.assignment
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(result.staged, target)
            result.staged = str(target.relative_to(folder))
        data = asdict(result)
        lines.append(json.dumps(data, ensure_ascii=False))
    with open(folder / "results.jsonl", "a", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


def merge_shards(settings: GradingPipeline) -> int:
    """Merge every shard folder under ``shards/`` into the course gradebook (one writer), then remove it."""
    root = settings.dir("shards")
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not folders:
        print(f"[merge-shards] {root} 下没有分片结果（no shard results; run `make autograde SHARD=k/N` first）")
        return 0
    merged, failed = 0, []
    for folder in folders:
        by_learner: dict[str, list[AssignmentResult]] = {}
        path = folder / "results.jsonl"
        for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
            data = json.loads(line)
            notebooks = [NotebookResult(**n) for n in data.pop("notebooks")]
            result = AssignmentResult(**data, notebooks=notebooks)
            if result.staged:
                result.staged = str(folder / result.staged)
            by_learner.setdefault(result.learner, []).append(result)
        for learner in sorted(by_learner):
            problems = merge(settings, by_learner[learner])  # a result that cannot be placed fails alone
            failed += [f"{learner}/{assignment}: {reason}" for assignment, reason in problems.items()]
            merged += len(by_learner[learner]) - len(problems)
        shutil.rmtree(folder)
        print(f"[merge-shards] merged {folder.name}")
    print(f"[merge-shards] {merged} assignment result(s) from {len(folders)} shard(s) -> {settings.db_path}")
    for line in failed:
        print(f"[merge-shards] {line}", file=sys.stderr)
    return 1 if failed else 0
