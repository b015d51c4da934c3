"""The deployment recipes are files a YAML parser reads, and they say what the grader needs.

autograde/recipes/kubernetes-indexed-job.yaml (an Indexed Job, one shard per pod) and
autograde/recipes/github-actions-shards.yml (a CI matrix of shards and a merge job): the shard count in the command
equals the Job's completions / the matrix, the shard index comes from the platform's variable, the seed comes from a
secret, and the Kubernetes container has the rights the grading sandbox needs to build its namespaces - exactly the
securityContext the grading pre-flight names (autograde/grpo_grader/probe.py) for root without CAP_SYS_ADMIN.
autograde/recipes/jupyterhub-grader.yaml (cloud-init user-data for a JupyterHub host grading without root) installs
bubblewrap and the AppArmor profile with the commands the pre-flight names, and runs the pre-flight. Every recipe is
read with a YAML loader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from autograde.grpo_grader import probe

RECIPES = Path(__file__).resolve().parents[1] / "autograde" / "recipes"


def _load(name: str) -> dict:
    data = yaml.safe_load((RECIPES / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{name} is not a YAML mapping"
    return data


def kubernetes_problems(job: dict) -> list[str]:
    problems = []
    spec = job.get("spec", {})
    if (job.get("apiVersion"), job.get("kind")) != ("batch/v1", "Job"):
        problems.append("not a batch/v1 Job")
    if spec.get("completionMode") != "Indexed":
        problems.append("completionMode is not Indexed")
    (container,) = spec["template"]["spec"]["containers"]
    command = " ".join(container.get("command", []))
    shards = re.search(r"SHARD=\$\(\(JOB_COMPLETION_INDEX \+ 1\)\)/(\d+)", command)
    if not shards:
        problems.append(f"the command does not take its shard from JOB_COMPLETION_INDEX: {command!r}")
    elif int(shards.group(1)) != spec.get("completions"):
        problems.append(f"SHARD=.../{shards.group(1)} but completions = {spec.get('completions')}")
    env = {e["name"]: e for e in container.get("env", [])}
    if "secretKeyRef" not in env.get("GRPO_GRADING_SEED", {}).get("valueFrom", {}):
        problems.append("GRPO_GRADING_SEED does not come from a Secret")
    security = container.get("securityContext", {})
    if security != yaml.safe_load(probe.KUBERNETES_SECURITY_CONTEXT):
        problems.append(f"the securityContext is not the one the pre-flight names: {probe.KUBERNETES_SECURITY_CONTEXT}")
    if "SYS_ADMIN" not in security.get("capabilities", {}).get("add", []):
        problems.append("the sandbox needs CAP_SYS_ADMIN (securityContext.capabilities.add)")
    if security.get("seccompProfile", {}).get("type") != "Unconfined":
        problems.append("the default seccomp profile blocks unshare/mount (seccompProfile: Unconfined)")
    if security.get("runAsUser", 0) != 0:
        problems.append("the grader runs as root in the container (it drops to a leased uid for learners' code)")
    return problems


def actions_problems(workflow: dict) -> list[str]:
    problems = []
    jobs = workflow.get("jobs", {})
    shard_job = jobs.get("shard", {})
    matrix = shard_job.get("strategy", {}).get("matrix", {}).get("shard", [])
    runs = " ".join(step.get("run", "") for step in shard_job.get("steps", []))
    count = re.search(r"SHARD=\$\{\{ matrix\.shard \}\}/(\d+)", runs)
    if not count:
        problems.append("the shard job does not run make autograde SHARD=${{ matrix.shard }}/N")
    elif sorted(matrix) != list(range(1, int(count.group(1)) + 1)):
        problems.append(f"matrix {matrix} does not cover shards 1..{count.group(1)}")
    seeded = [s for s in shard_job.get("steps", []) if "make autograde" in s.get("run", "")]
    if not seeded or "secrets.GRADING_SEED" not in str(seeded[0].get("env", {}).get("GRPO_GRADING_SEED", "")):
        problems.append("the grading step does not read GRPO_GRADING_SEED from a secret")
    merge = jobs.get("merge", {})
    if merge.get("needs") != "shard" or "make merge-shards" not in " ".join(
        s.get("run", "") for s in merge.get("steps", [])
    ):
        problems.append("no merge job that needs the shards and runs make merge-shards")
    return problems


def jupyterhub_problems(config: dict) -> list[str]:
    problems = []
    if "bubblewrap" not in config.get("packages", []):
        problems.append("bubblewrap is not installed")
    steps = [step if isinstance(step, str) else " ".join(step) for step in config.get("runcmd", [])]
    install = probe.apparmor_install("/srv/grpo-course/environments/apparmor-bwrap")
    if not any(install in step for step in steps):
        problems.append(f"the AppArmor profile is not installed as the pre-flight says: {install}")
    probe_steps = [s for s in steps if "autograde.pipeline probe" in s]
    if not probe_steps or not probe_steps[-1].startswith("sudo -u "):
        problems.append("the pre-flight does not run as the (non-root) instructor")
    return problems


def test_every_recipe_is_yaml():
    names = sorted(p.name for p in RECIPES.iterdir() if p.suffix in (".yaml", ".yml"))
    assert names == ["github-actions-shards.yml", "jupyterhub-grader.yaml", "kubernetes-indexed-job.yaml"], names
    for name in names:
        _load(name)


def test_jupyterhub_recipe():
    assert jupyterhub_problems(_load("jupyterhub-grader.yaml")) == []


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda c: c["packages"].remove("bubblewrap"), "bubblewrap"),
        (lambda c: c.update(runcmd=[s for s in c["runcmd"] if "apparmor_parser" not in s]), "AppArmor"),
        (lambda c: c.update(runcmd=[s for s in c["runcmd"] if "autograde.pipeline probe" not in s]), "pre-flight"),
    ],
)
def test_the_jupyterhub_check_can_fail(edit, problem):
    config = _load("jupyterhub-grader.yaml")
    edit(config)
    assert any(problem in p for p in jupyterhub_problems(config))


def test_kubernetes_indexed_job_recipe():
    assert kubernetes_problems(_load("kubernetes-indexed-job.yaml")) == []


def test_ci_matrix_recipe():
    assert actions_problems(_load("github-actions-shards.yml")) == []


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda c, s: s.update(completions=4), "completions = 4"),
        (lambda c, s: c["securityContext"].pop("capabilities"), "CAP_SYS_ADMIN"),
        (lambda c, s: c["securityContext"].update(seccompProfile={"type": "RuntimeDefault"}), "seccomp"),
        (lambda c, s: c["securityContext"].pop("appArmorProfile"), "the pre-flight names"),
        (lambda c, s: c.update(env=[]), "Secret"),
    ],
)
def test_the_kubernetes_check_can_fail(edit, problem):
    job = _load("kubernetes-indexed-job.yaml")
    spec = job["spec"]
    edit(spec["template"]["spec"]["containers"][0], spec)
    assert any(problem in p for p in kubernetes_problems(job))


def test_the_ci_check_can_fail():
    workflow = _load("github-actions-shards.yml")
    workflow["jobs"]["shard"]["strategy"]["matrix"]["shard"] = [1, 2, 3]
    assert any("does not cover" in p for p in actions_problems(workflow))
    workflow["jobs"].pop("merge")
    assert any("merge" in p for p in actions_problems(workflow))
