"""A rank that leaves without destroy_process_group while the backend's watchdog is inside a call
to a Python store (PyTorch's own tests do so on a skip). The store here is a Python subclass of
torch's Store whose calls take 150 ms, so that the watchdog (polling every 100 ms) is nearly
always in one at exit. The process must end with its own exit code: before Note [Python stores
at interpreter exit] the watchdog's thread took the GIL of the finalizing interpreter, which ended
it through noexcept frames (SIGABRT in PyTorch's suite; SIGSEGV of both ranks here, every time in
three runs). Run under torchrun with 2 ranks; torchrun fails the run
if a rank dies of a signal, and run.sh checks that each rank printed its last line."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import cohort  # noqa: F401  (registers the backend)


class SlowStore(dist.Store):
    """Every call goes to a FileStore after 150 ms in Python (time.sleep lets go of the GIL)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def _slow(self):
        time.sleep(0.15)

    def set(self, key, value):
        self._slow()
        self.inner.set(key, value)

    def get(self, key):
        self._slow()
        return self.inner.get(key)

    def add(self, key, amount):
        self._slow()
        return self.inner.add(key, amount)

    def compare_set(self, key, expected, desired):
        self._slow()
        return self.inner.compare_set(key, expected, desired)

    def check(self, keys):
        self._slow()
        return self.inner.check(keys)

    def wait(self, keys, timeout=None):
        self._slow()
        if timeout is None:
            self.inner.wait(keys)
        else:
            self.inner.wait(keys, timeout)

    def delete_key(self, key):
        self._slow()
        return self.inner.delete_key(key)

    def num_keys(self):
        return self.inner.num_keys()


def main():
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = SlowStore(dist.FileStore(os.environ["COHORT_TEST_STORE_FILE"], size))
    dist.init_process_group("cohort", store=store, rank=rank, world_size=size,
                            timeout=timedelta(seconds=60))
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    assert t.tolist() == [size * (size + 1) / 2] * 4, t
    time.sleep(1.0)  # the watchdog polls the store meanwhile
    print(f"rank {rank}: leaving without destroy_process_group", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
