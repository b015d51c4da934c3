"""The grading seed and the digests that fingerprint a grading, without torch: the commands that grade nothing
(``grades``, ``feedback``, ``merge-shards``, a run with nothing new) never import torch or an oracle."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from tools import env_vars

from .course import AUTOGRADE

SEED_ENV = env_vars.GRADING_SEED
SEED_NAME = ".grading_seed"  # <course>/.grading_seed: git-ignored; created by `make autograde`
HERE = Path(__file__).resolve().parent
# what loads an oracle, draws its cases, carries them to the kernel and back, and judges them
ORACLE_MACHINERY = ("oracle.py", "vocabulary.py", "wire.py", "judging.py", "case_runner.py", "oracle_run.py")


def grading_seed(create: bool = False, announce: Callable[[str], None] = print, course: Path = AUTOGRADE) -> str:
    """The instructor's secret: ``$GRPO_GRADING_SEED`` or ``<course>/.grading_seed`` (``autograde/.grading_seed``
    for the course of this checkout; created when asked, readable by its owner only)."""
    SEED_FILE = Path(course) / SEED_NAME
    value = os.environ.get(SEED_ENV, "").strip()
    if value:
        return value
    if SEED_FILE.is_file():
        value = SEED_FILE.read_text(encoding="utf-8").strip()
        if value:
            return value
    if not create:
        raise RuntimeError(f"no grading seed: set {SEED_ENV} or run `make autograde` once (it creates {SEED_FILE})")
    value = secrets.token_hex(16)
    fd = os.open(SEED_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    announce(
        f"[autograde] 已生成评分种子 {SEED_FILE}（只有教师可读，已被 git 忽略；评分用例由它抽取，请勿提交或公开。"
        f"多台机器评分时用同一个种子：复制此文件或设置 {SEED_ENV}）"
        f"(created the secret grading seed {SEED_FILE}; keep it private, share it only with grading machines)"
    )
    return value


def seed_digest(seed: str) -> str:
    """What may be stored (fingerprints, reports): a hash of the seed, never the seed."""
    return hashlib.sha256(("grpo-grading-seed:" + seed).encode()).hexdigest()[:16]


def oracle_digest(assignment: str) -> str:
    """Changes when the oracle module of ``assignment`` changes (a regrade is then due), the helpers the oracles share
    (``oracles/_*.py``) or the oracle machinery (``ORACLE_MACHINERY``). The module is found, not imported."""
    try:
        spec = importlib.util.find_spec(f"{__package__}.oracles.{assignment}")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return "none"
    helpers = sorted((HERE / "oracles").glob("_*.py"))  # the oracles' shared references (_policy_losses.py, ...)
    parts = [Path(spec.origin).read_bytes(), *((HERE / name).read_bytes() for name in ORACLE_MACHINERY)]
    parts += [path.read_bytes() for path in helpers]
    return hashlib.sha256(b"".join(parts)).hexdigest()[:16]
