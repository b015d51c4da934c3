"""The README's Slurm recipe, run for real: `autograde/slurm/grade.sh 3` on a private single-node Slurm cluster.

tests/slurm_cluster.py starts Debian's slurm-wlm and munge in a folder of the test; the script submits a 3-task job
array (each task `make autograde SHARD=$((SLURM_ARRAY_TASK_ID+1))/3`) and `make merge-shards` after it. The grades
must equal one ordinary run's for the same learners and seed. Marked ``integration`` (`make test-integration`,
which CI runs after `make test`): it needs root and the two Debian packages; elsewhere it reports itself skipped.
"""

from __future__ import annotations

import re
import secrets
import subprocess

import pytest
import slurm_cluster  # tests/slurm_cluster.py
from autograde_helpers import ASSIGNMENTS, ROOT, pipeline_env, run_pipeline  # tests/autograde_helpers.py
from test_autograde_class import SHARD_SUBSET, _release_course, _subset_course, subset_rows

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_slurm_job_array_grades_like_one_run(tmp_path, released_course):
    why = slurm_cluster.unavailable()
    if why:
        pytest.skip(why)
    pristine = _release_course(tmp_path / "release", released_course["course"])
    seed = secrets.token_hex(12)
    single, args = _subset_course(pristine, tmp_path / "single")
    assert run_pipeline("autograde", "--course", str(single), *args, seed=seed).returncode == 0
    course, _ = _subset_course(pristine, tmp_path / "sharded")
    cluster = slurm_cluster.Cluster(tmp_path / "slurm")
    cluster.start()
    try:
        env = {
            **pipeline_env(),
            **cluster.env,
            "COURSE": str(course),
            "GRADE_ARGS": " ".join(args),
            "WAIT": "1",
            "GRPO_GRADING_SEED": seed,
        }
        done = subprocess.run(
            [str(ROOT / "autograde" / "slurm" / "grade.sh"), "3"],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
        logs = {p.name: p.read_text(errors="replace") for p in sorted((course / "shards").glob("slurm-*.log"))}
    finally:
        cluster.stop()
    report = done.stdout + "".join(f"\n--- {name}\n{text[-1500:]}" for name, text in logs.items())
    assert done.returncode == 0, report + cluster.logs()
    # every line the recipe prints says what it is (sbatch --parsable's bare job ids are not passed through)
    assert "[slurm] 作业数组 job array" in done.stdout and "[slurm] 合并任务 merge job" in done.stdout, done.stdout
    assert not re.search(r"^\s*\d+(;\S+)?\s*$", done.stdout, re.M), done.stdout
    tasks = sorted(m.group(1) for name in logs if (m := re.fullmatch(r"slurm-\d+_(\d+)\.log", name)))
    assert tasks == ["0", "1", "2"] and any(name.startswith("slurm-merge-") for name in logs), report
    assert all("Traceback" not in text for text in logs.values()), report
    assert not [p for p in (course / "shards").iterdir() if p.is_dir()], "merge-shards consumed every shard"
    sharded, reference = subset_rows(course), subset_rows(single)
    assert sharded == reference and len(sharded) == len(SHARD_SUBSET) * len(ASSIGNMENTS)
