"""The isolation a grading run chose (``sandbox_choice.choose_sandbox``): its mode, the uids it leased, what the
probe saw. Its own module so that the slot code and the chooser both read it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sandbox:
    mode: str  # bwrap | none
    uids: list[int] = field(default_factory=list)  # root: one leased uid per slot (its kernels')
    probe: dict = field(default_factory=dict)  # what a kernel sees
    problems: list[str] = field(default_factory=list)
    leases: list = field(default_factory=list)  # open lock files holding the uids
    # folders outside the virtual environment the interpreter's sys.path needs (probe.interpreter_paths): bound
    # read-only into every sandbox ("bind"), the ones a kernel does not find itself on its PYTHONPATH ("pythonpath")
    paths: dict = field(default_factory=dict)
    caps: object = None  # the run's job caps (job_caps.JobCaps), set once the sandbox is chosen

    def describe(self) -> str:
        if self.mode == "bwrap":
            who = f"uid {', '.join(map(str, self.uids))}" if self.uids else "the grader's uid in a user namespace"
            return (
                f"bwrap: kernels run as {who} in bubblewrap's allow-list view (interpreter, virtual environment, "
                f"course copy, private tmpfs), private mount/PID/IPC/network namespaces"
            )
        return "none: kernels run as the grader's own user and can read whatever it can read"


SANDBOX_MODES = ("bwrap", "none")
