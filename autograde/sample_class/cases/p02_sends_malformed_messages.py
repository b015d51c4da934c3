"""Worked answers (nb01) and, below the first answer, a cell that publishes malformed messages from its kernel: a
display whose ``text/plain`` is a number, one whose ``data`` is a list, an output with a string ``execution_count``,
an error output whose ``ename`` is an integer, a stream without its text. Plain nbclient raises on the first of them
and nbgrader then drops the notebook (status ``error``, ``make autograde`` exits 1). Here that one cell fails with
the reasons and everything else is graded: 17 of 17, status graded, no flag but the copy flags."""
MALFORMED = '''from IPython import get_ipython

_kernel = get_ipython().kernel
for _type, _content in [
    ("display_data", {"data": {"text/plain": 17}, "metadata": {}}),
    ("display_data", {"data": [1, 2], "metadata": {}}),
    ("execute_result", {"data": {"text/plain": "17"}, "metadata": {}, "execution_count": "17"}),
    ("error", {"ename": 17, "evalue": "17", "traceback": []}),
    ("stream", {"name": "stdout"}),
]:
    _kernel.session.send(_kernel.iopub_socket, _type, _content, parent=_kernel.get_parent("shell"))
'''
CASE = {
    "nb01_group_advantages": {"base": "solution", "insert_after": [("compute_group_advantages", MALFORMED)]},
}
