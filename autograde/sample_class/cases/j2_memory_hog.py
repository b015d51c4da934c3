"""A memory hog spread over processes (nb01): the answer cell of the conventions question first keeps twelve helper
processes that each fill 192 MiB and sleep, 2.25 GiB in all, every process far below the per-process limit
(``RLIMIT_AS``); a helper that dies before it holds its share is started again. The sample class caps a job's memory
at 1536 MiB (``sample_class/build.py`` ``TIMEOUTS``): the kernel's job and the oracle driver's job are each stopped
when they pass it, with the reason; the tests before keep their points (3 + 5 + 2 + 3), the conventions question is
lost: 13 of 17, status graded. Without the job cap the helpers would fit, the cell would finish and the notebook
would score 17."""
HOG = '''
import os as _os
import time as _time


def _keep_caches(count=12, size=192 * 2**20):
    """Keep `count` helper processes that each hold `size` bytes (they sleep); one that could not is started again."""
    ready = 0
    while ready < count:
        read_end, write_end = _os.pipe()
        if _os.fork() == 0:
            try:
                _os.close(read_end)
                block = b"\\x01" * size
                _os.write(write_end, b"1")
                _time.sleep(600 + len(block) * 0)
            finally:
                _os._exit(0)
        _os.close(write_end)
        ready += _os.read(read_end, 1) == b"1"
        _os.close(read_end)


_keep_caches()


'''
CASE = {
    "nb01_group_advantages": {"base": "solution", "edit": {"answer_conventions_0001": [
        ("def answer_conventions(", HOG + "def answer_conventions("),
    ]}},
}
