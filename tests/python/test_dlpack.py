"""cohort.init() and its collectives over DLPack arrays (NumPy and PyTorch), on 3 host ranks
under cohortrun: every collective against closed-form values, in place and out of place,
synchronous and asynchronous, and the errors for arrays cohort cannot work with."""

import numpy as np
import torch

import cohort


def expect_error(kind, words, fn):
    try:
        fn()
    except kind as error:
        text = str(error)
        for word in words:
            assert word in text, f"{kind.__name__} without {word!r}: {text}"
        return
    raise AssertionError(f"expected {kind.__name__} mentioning {words}")


def main():
    world = cohort.init(timeout=60)
    r, n = world.rank, world.size
    assert n == 3, n
    assert world.local_world_size == 3 and world.num_nodes == 1
    assert world.device == "host" and world.backend == "shm", (world.device, world.backend)
    comm = world.comm

    # all_reduce, each op, NumPy and torch, several dtypes.
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        x = np.arange(5, dtype=dtype) + r
        comm.all_reduce(x, "sum")
        assert (x == 3 * np.arange(5) + 3).all(), x
    x = np.full(7, r + 1.0, np.float32)
    comm.all_reduce(x, "avg")
    assert np.allclose(x, 2.0), x
    x = np.array([r, -r], np.int32)
    comm.all_reduce(x, "min")
    assert (x == [0, -2]).all(), x
    x = np.array([r, -r], np.int32)
    comm.all_reduce(x, "max")
    assert (x == [2, 0]).all(), x
    t = torch.full((1000,), float(r), dtype=torch.bfloat16)
    comm.all_reduce(t)
    assert (t == 3).all(), t
    t = torch.arange(6, dtype=torch.float16).reshape(2, 3) * (r + 1)
    comm.all_reduce(t, "max")
    assert torch.equal(t, torch.arange(6, dtype=torch.float16).reshape(2, 3) * 3)
    # out of place: input unchanged
    src = np.full(4, r + 1, np.int64)
    dst = np.zeros(4, np.int64)
    comm.all_reduce(src, output=dst)
    assert (dst == 6).all() and (src == r + 1).all(), (src, dst)
    # empty arrays are fine
    comm.all_reduce(np.zeros(0, np.float32))

    # broadcast from each root
    for root in range(n):
        x = np.full(3, float(r), np.float64)
        comm.broadcast(x, root=root)
        assert (x == root).all(), (root, x)

    # all_gather and reduce_scatter
    gathered = np.zeros((n, 2), np.float32)
    comm.all_gather(np.full(2, float(r), np.float32), gathered)
    assert (gathered == np.arange(n, dtype=np.float32)[:, None]).all(), gathered
    piece = np.zeros(2, np.int32)
    comm.reduce_scatter(np.arange(2 * n, dtype=np.int32) * (r + 1), piece)
    assert (piece == 6 * np.arange(2 * r, 2 * r + 2)).all(), piece

    # asynchronous: the Work keeps the arrays alive and wait() finishes it
    big = np.ones(1 << 20, np.float32)
    work = comm.all_reduce(big, async_op=True)
    work.wait()
    assert work.done() and big[0] == 3 and big[-1] == 3 and work.op == "all_reduce"
    comm.barrier()

    # split: ranks 0 and 2 in one group, 1 alone
    sub = comm.split(color=r % 2)
    assert sub.size == (2 if r % 2 == 0 else 1), sub.size
    x = np.array([r + 1.0])
    sub.all_reduce(x)
    assert x[0] == (4.0 if r % 2 == 0 else 2.0), x
    assert comm.split(color=-1) is None
    assert any("all_reduce" in line for line in comm.recent_collectives())

    # errors, each saying what was wrong and what to do
    expect_error(ValueError, ["int16", "float32"], lambda: comm.all_reduce(np.zeros(3, np.int16)))
    expect_error(ValueError, ["not contiguous", "contiguous"],
                 lambda: comm.all_reduce(np.zeros((4, 4), np.float32)[:, 1]))
    read_only = np.zeros(4, np.float32)
    read_only.flags.writeable = False
    expect_error(ValueError, ["read-only", "writable"], lambda: comm.all_reduce(read_only))
    expect_error(TypeError, ["builtins.list", "__dlpack__"], lambda: comm.all_reduce([1.0, 2.0]))
    expect_error(ValueError, ["'product'", "'sum'"],
                 lambda: comm.all_reduce(np.zeros(2, np.float32), "product"))
    expect_error(cohort.InvalidArgument, ["all_gather output must hold", "5 and 6"],
                 lambda: comm.all_gather(np.zeros(2, np.float32), np.zeros(5, np.float32)))
    expect_error(ValueError, ["stream is for collectives on CUDA"],
                 lambda: comm.all_reduce(np.zeros(2, np.float32), stream=0))
    expect_error(ValueError, ["timeout"], lambda: cohort.init(timeout=-1))
    # the errors left nothing behind: the communicator still works
    x = np.ones(2, np.float32)
    comm.all_reduce(x)
    assert (x == 3).all()

    world.close()
    expect_error(ValueError, ["closed"], lambda: world.comm)
    print(f"rank {r}: dlpack API passed")


if __name__ == "__main__":
    main()
