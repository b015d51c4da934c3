"""Worked answers (nb01) and, as the notebook's last cell (after the last test cell, so after the last case result
was sent), a cell that forks a child that sleeps for ten minutes and then loops forever, swallowing the cell's
interrupt. Before the grace after the last result, this held the slot until the notebook's hard limit (900 s by
default) and scored 0 as a timeout; now the kernel and every process of its uid are killed ``grace_after_results``
seconds after the last result, the slot is free and the points stand: 17 of 17, status graded, a note that says
so; ``processes`` flags the fork."""
LINGER = '''import os
import time

if os.fork() == 0:
    time.sleep(600)
    os._exit(0)
while True:
    try:
        time.sleep(1)
    except KeyboardInterrupt:
        pass
'''
CASE = {
    "nb01_group_advantages": {"base": "solution", "append": [LINGER]},
}
