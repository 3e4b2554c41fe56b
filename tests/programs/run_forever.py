"""Runs until it is killed: each rank prints its pid once every rank is running (a test then
cancels the job from outside)."""
import json
import os
import time

import dpmpi

comm = dpmpi.init()
comm.Barrier()
print(json.dumps({"event": "running", "rank": comm.Get_rank(), "pid": os.getpid()}), flush=True)
while True:
    time.sleep(0.05)
