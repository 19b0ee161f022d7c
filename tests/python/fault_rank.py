"""One rank of a fault test (test_faults.py): joins a "cohort" process group of WORLD_SIZE ranks
(env://, rank 0 hosts the TCPStore), runs one good all_reduce, then plays its part in the
scenario, and writes what happened to OUT (JSON): the exception's type and text, and how long
the failing call took."""

import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import cohort  # noqa: F401

SCENARIO = os.environ["FAULT_SCENARIO"]
VICTIM = int(os.environ.get("FAULT_RANK", "2"))
TIMEOUT = float(os.environ.get("FAULT_TIMEOUT", "10"))


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group("cohort", timeout=timedelta(seconds=TIMEOUT))
    t = torch.ones(1024)
    dist.all_reduce(t)
    assert t[0].item() == dist.get_world_size()
    record = {"rank": rank, "scenario": SCENARIO}
    if rank == VICTIM:
        if SCENARIO == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        elif SCENARIO == "absent":
            time.sleep(TIMEOUT + 20)  # never calls; ended by the test
            return
        elif SCENARIO in ("mismatched", "counts"):
            start = time.monotonic()
            try:
                if SCENARIO == "mismatched":
                    dist.broadcast(torch.ones(256), src=0)
                else:
                    dist.all_reduce(torch.ones(1000))
                record["error"] = None
            except Exception as error:  # noqa: BLE001 (the test reads what it was)
                record.update(type=type(error).__name__, error=str(error))
            record["seconds"] = time.monotonic() - start
            json.dump(record, open(os.environ["OUT"], "w"))
            sys.stdout.flush()
            os._exit(1 if record.get("error") else 0)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        record["error"] = None
    except Exception as error:  # noqa: BLE001
        record.update(type=type(error).__name__, error=str(error))
    record["seconds"] = time.monotonic() - start
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        record["error_file_written"] = os.path.exists(error_file)
    json.dump(record, open(os.environ["OUT"], "w"))
    sys.stdout.flush()
    if rank == 0:
        # Rank 0 hosts the TCPStore here; under torchrun the agent hosts it and outlives the
        # ranks. FAULT_STORE_LINGER keeps it up that long for the other ranks' diagnoses.
        time.sleep(float(os.environ.get("FAULT_STORE_LINGER", "0")))
    # A rank whose group failed leaves at once, as a program that does not catch the error would.
    os._exit(1 if record.get("error") else 0)


if __name__ == "__main__":
    main()
