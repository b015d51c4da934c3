"""Create the course's virtual environment and install a profile (used by `make setup`).

Runs with the system Python (nothing of the course is importable yet). Idempotent: pip skips what is
already installed, and `make` only calls this when a requirements file changed or .venv is missing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # system Python, before `tools` is importable: by path
PROFILE_FILES = {
    "BASE-CPU": ["base-cpu.txt", "instructor.txt"],
    "PT-CPU": ["pt-cpu.txt", "instructor.txt"],
    "PT-RL-CUDA": ["pt-rl-cuda.txt", "instructor.txt"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--venv", default=".venv")
    parser.add_argument("--profile", default="PT-CPU", choices=sorted(PROFILE_FILES))
    args = parser.parse_args()
    if sys.version_info < (3, 10):  # noqa: UP036  runs with the system Python, which may be older
        print(f"需要 Python >= 3.10，当前是 {sys.version.split()[0]}（Python 3.10+ is required）", file=sys.stderr)
        return 2
    env_dir = (ROOT / args.venv).resolve()
    python = env_dir / "bin" / "python"
    if not python.exists():
        print(f"[setup] creating {env_dir}")
        venv.EnvBuilder(with_pip=True).create(env_dir)
    requirements = []
    for name in PROFILE_FILES[args.profile]:
        requirements += ["-r", str(ROOT / "environments" / name)]
    print(f"[setup] installing profile {args.profile} (+ grading tools) into {env_dir} ...")
    command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *requirements]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # pip prints a warning for every file:// index entry that lacks a package; keep only real problems.
    noise = "is neither a file nor a directory"
    for line in done.stdout.splitlines():
        if noise not in line:
            print(line)
    if done.returncode != 0:
        print("[setup] pip install failed: see the lines above (安装失败，见上方输出)", file=sys.stderr)
        return done.returncode
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(ROOT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if done.returncode != 0:
        print(done.stdout)
        return done.returncode
    # jsonschema[format-nongpl] (pulled in by jupyter-events) installs rfc3987-syntax, which builds an Earley
    # parser when imported: 1.4 s added to every process that imports nbformat (each nbgrader command, every
    # grading worker, the lab server). It only adds the "iri" format checks that nothing here uses; without it
    # jsonschema skips that format. pip records no requirement on it (`pip check` stays clean).
    subprocess.run(
        [str(python), "-m", "pip", "uninstall", "-y", "-q", "rfc3987-syntax"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if not shutil.which("chromium") and not shutil.which("chromium-browser"):
        print(
            "[setup] note: Chromium not found - the browser test of `make test` will be skipped. "
            "Install it with `apt-get install -y chromium fonts-wqy-microhei` and "
            "`npm ci --prefix tests/browser` (浏览器测试需要 Chromium 与 playwright-core)。"
        )
    print("[setup] done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
