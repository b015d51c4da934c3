"""What every course target needs beyond the virtual environment, made ready once (``make setup`` and every target
that grades, tests or trains depend on it, so ``make demo`` and ``make test`` on a fresh machine need nothing else).

Each step is idempotent and cheap when its work is done (a few seconds in all):

1. ``bubblewrap`` (``bwrap``), the grading sandbox: installed with apt where this runs as root on Debian/Ubuntu;
   otherwise one sentence says what to install, and the rest goes on (grading then stops with the probe's reason);
2. the checkpoints the grading kernels load (``python -m autograde.pipeline prepare``: the tiny Qwen2 checkpoint and
   lesson 7's SFT warm start);
3. lesson 7's two SFT warm starts (``make warm-starts``);
4. the browser tests' ``playwright-core`` (``npm ci --prefix tests/browser``) where npm exists; Chromium itself is
   the machine's (README: system requirements).

    python -m tools.cli.ready
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tools.project_runtime import resolve_project_root

ROOT = resolve_project_root(Path(__file__))
BROWSER_DIR = Path("tests") / "browser"
PLAYWRIGHT = BROWSER_DIR / "node_modules" / "playwright-core"
BWRAP_HINT = (
    "[setup] 没有找到 bubblewrap（bwrap），评分沙箱需要它：请运行 `sudo apt-get install -y bubblewrap`"
    "（Fedora：`sudo dnf install bubblewrap`）。"
    " bubblewrap (bwrap), the grading sandbox, is missing: `sudo apt-get install -y bubblewrap`"
    " (Fedora: `sudo dnf install bubblewrap`)."
)


def _run(command: list[str]) -> bool:
    sys.stdout.flush()
    return subprocess.run(command, cwd=ROOT).returncode == 0


def ensure_bubblewrap(say=print, which=shutil.which, euid=os.geteuid) -> bool:
    """True when ``bwrap`` is there (after installing it where root and apt allow it); else say what to install."""
    if which("bwrap"):
        return True
    if euid() == 0 and which("apt-get"):
        say("[setup] 安装 bubblewrap（installing bubblewrap, the grading sandbox, with apt-get）")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "bubblewrap"]):
            done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if done.returncode != 0:
                say(done.stdout[-2000:])
                break
        if which("bwrap"):
            return True
    say(BWRAP_HINT)
    return False


def ensure_playwright(say=print, which=shutil.which, root: Path = ROOT) -> bool:
    """True when the browser tests' ``playwright-core`` is installed (``npm ci`` where npm exists)."""
    if (root / PLAYWRIGHT).is_dir():
        return True
    if not which("npm"):
        say(
            "[setup] 没有 npm：浏览器测试会被跳过（install Node.js/npm for the browser tests; they are skipped"
            " without it）"
        )
        return False
    say("[setup] npm ci --prefix tests/browser（playwright-core for the browser tests; no browser download）")
    done = subprocess.run(
        ["npm", "ci", "--prefix", str(root / BROWSER_DIR), "--no-audit", "--no-fund"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if done.returncode != 0:
        say(done.stdout[-2000:])
        say("[setup] npm ci 失败：浏览器测试会被跳过（npm ci failed: the browser tests will be skipped）")
    return (root / PLAYWRIGHT).is_dir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    ensure_bubblewrap()
    python = sys.executable
    ok = _run([python, "-m", "autograde.pipeline", "prepare"])
    ok = _run([python, "-c", "from tools.online_grpo import build_warm_starts; build_warm_starts()"]) and ok
    ensure_playwright()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
