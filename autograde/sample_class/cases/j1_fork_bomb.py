"""A fork bomb (nb01): the answer cell of group_relative_advantages first starts 200 sleeping "helper" processes
and retries each fork that fails until all 200 exist. The sample class caps a job at 64 tasks
(``sample_class/build.py`` ``TIMEOUTS``): the kernel's job and the oracle driver's job each reach the cap and are
stopped there, with the reason; the tests that ran before keep their points (compute_group_advantages: 3 + 5), the
rest of the notebook is lost: 8 of 17, status graded. Without the cap the 200 processes would start, the cell would
finish and the notebook would score 17. The other learners of the run are graded as usual meanwhile."""
BOMB = '''
import os as _os
import time as _time


def _start_helpers(count=200):
    """Start `count` helper processes (they sleep); a fork that fails is tried again."""
    started = 0
    while started < count:
        try:
            if _os.fork() == 0:
                _time.sleep(600)
                _os._exit(0)
            started += 1
        except OSError:  # Resource temporarily unavailable: try again
            _time.sleep(0.01)


_start_helpers()


'''
CASE = {
    "nb01_group_advantages": {"base": "solution", "edit": {"group_relative_advantages": [
        ("def group_relative_advantages(", BOMB + "def group_relative_advantages("),
    ]}},
}
