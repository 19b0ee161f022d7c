"""init_process_group("cohort") under torchrun: every collective the backend runs, against
closed-form values, on CPU tensors; subgroups, coalescing, futures, and the errors for calls it
does not run. COHORT_TEST_INIT_METHOD (file://...) makes torch hand over a FileStore instead of
torchrun's TCPStore, which the backend then reaches through Python."""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

import cohort  # noqa: F401  (registers the backend)


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
    init_method = os.environ.get("COHORT_TEST_INIT_METHOD")
    if init_method:
        dist.init_process_group("cohort", init_method=init_method,
                                rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]),
                                timeout=timedelta(seconds=60))
    else:
        dist.init_process_group("cohort", timeout=timedelta(seconds=60))
    r, n = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "cohort", dist.get_backend()
    # cohort records its collectives itself: torch (2.15) attaches its generic flight recorder
    # hook, a captured traceback per collective, to no group of cohort's (Note [torch's flight
    # recorder and cohort's] in cohort/_torch_backend.py). Older torch has no such hook.
    world = dist.distributed_c10d._world
    if hasattr(world, "pg_flight_recorder_hooks"):
        assert "cohort" in dist.distributed_c10d._FR_SELF_RECORDING_BACKENDS
        assert dist.group.WORLD not in world.pg_flight_recorder_hooks, "torch's FR hook attached"

    # all_reduce: every op, dtypes cohort reduces, complex as pairs, bool with min/max
    expected = {dist.ReduceOp.SUM: sum(range(1, n + 1)), dist.ReduceOp.AVG: (n + 1) / 2,
                dist.ReduceOp.MIN: 1, dist.ReduceOp.MAX: n,
                dist.ReduceOp.PRODUCT: float(torch.arange(1, n + 1).prod())}
    for op, value in expected.items():
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            t = torch.full((5,), r + 1.0, dtype=dtype)
            dist.all_reduce(t, op=op)
            assert torch.allclose(t.double(), torch.full((5,), float(value), dtype=torch.float64),
                                  rtol=1e-2), (op, dtype, t)
    for dtype in (torch.int32, torch.int64, torch.uint8):
        t = torch.full((3,), r + 1, dtype=dtype)
        dist.all_reduce(t)
        assert (t == n * (n + 1) // 2).all(), (dtype, t)
    c = torch.full((4,), complex(r, -r), dtype=torch.complex64)
    dist.all_reduce(c)
    total = sum(range(n))
    assert torch.equal(c, torch.full((4,), complex(total, -total), dtype=torch.complex64)), c
    b = torch.tensor([r == 0, True, False])
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    assert b.tolist() == [True, True, False], b
    # a tensor of many dimensions is one block
    m = torch.ones(2, 3, 4) * r
    dist.all_reduce(m)
    assert (m == total).all()

    # broadcast from every root, any dtype (int16 travels as bytes)
    for root in range(n):
        t = torch.full((3,), r, dtype=torch.int16)
        dist.broadcast(t, src=root)
        assert (t == root).all(), (root, t)

    # all_gather into a list and into one tensor; all_gather_object
    out = [torch.zeros(2) for _ in range(n)]
    dist.all_gather(out, torch.full((2,), float(r)))
    assert [o.tolist() for o in out] == [[float(i)] * 2 for i in range(n)], out
    flat = torch.zeros(2 * n, dtype=torch.float64)
    dist.all_gather_into_tensor(flat, torch.full((2,), float(r), dtype=torch.float64))
    assert flat.tolist() == [float(i) for i in range(n) for _ in range(2)], flat
    ins = [torch.full((2,), float(r)), torch.full((3,), 10.0 + r)]
    outs = [[torch.zeros(2), torch.zeros(3)] for _ in range(n)]
    dist.all_gather_coalesced(outs, ins)
    assert all(outs[q][0].tolist() == [float(q)] * 2 and outs[q][1].tolist() == [10.0 + q] * 3
               for q in range(n)), outs
    objects = [None] * n
    dist.all_gather_object(objects, {"rank": r})
    assert objects == [{"rank": i} for i in range(n)], objects

    # reduce_scatter from a list and from one tensor, with sum and product
    piece = torch.zeros(2)
    dist.reduce_scatter(piece, [torch.full((2,), float(i * (r + 1))) for i in range(n)])
    assert (piece == r * n * (n + 1) / 2).all(), piece
    piece = torch.zeros(2, dtype=torch.int64)
    dist.reduce_scatter_tensor(piece, torch.arange(2 * n) + 1, op=dist.ReduceOp.PRODUCT)
    assert piece.tolist() == [(2 * r + 1) ** n, (2 * r + 2) ** n], piece

    # reduce, gather, scatter (built from all_reduce, all_gather, broadcast)
    t = torch.full((2,), float(r + 1))
    dist.reduce(t, dst=n - 1)
    assert (t == (n * (n + 1) / 2 if r == n - 1 else r + 1)).all(), t
    gathered = [torch.zeros(1) for _ in range(n)] if r == 0 else None
    dist.gather(torch.tensor([float(r)]), gathered, dst=0)
    if r == 0:
        assert [g.item() for g in gathered] == list(map(float, range(n))), gathered
    got = torch.zeros(2)
    dist.scatter(got, [torch.full((2,), float(i)) for i in range(n)] if r == 1 else None, src=1)
    assert (got == r).all(), got

    # asynchronous work and its future; a large one goes to a worker thread
    big = torch.ones(1 << 20)
    work = dist.all_reduce(big, async_op=True)
    value = work.get_future().wait()
    assert value[0] is big and (big == n).all() and work.is_completed()
    work = dist.all_reduce(torch.ones(8), async_op=True)
    work.wait()
    fut = dist.all_reduce(torch.ones(3), async_op=True).get_future()
    assert fut.then(lambda f: f.value()[0] * 2).wait().tolist() == [2.0 * n] * 3

    # coalescing
    tensors = [torch.full((k + 1,), float(r)) for k in range(3)]
    with dist._coalescing_manager(async_ops=True) as manager:
        for t in tensors:
            dist.all_reduce(t)
    manager.wait()
    assert all((t == total).all() for t in tensors), tensors
    outs = [torch.zeros(2 * n) for _ in range(2)]
    with dist._coalescing_manager():
        for o in outs:
            dist.all_gather_into_tensor(o, torch.full((2,), float(r)))
    assert all(o.tolist() == [float(i) for i in range(n) for _ in range(2)] for o in outs), outs

    dist.barrier()

    # subgroups: node membership decided per group; non-members get no group
    members = [0, n - 1]
    group = dist.new_group(members)
    if r in members:
        t = torch.ones(2) * r
        dist.all_reduce(t, group=group)
        assert (t == sum(members)).all(), t
        assert dist.get_world_size(group) == 2
        if hasattr(world, "pg_flight_recorder_hooks"):
            assert group not in world.pg_flight_recorder_hooks, "torch's FR hook on a subgroup"
    odd = dist.new_group([i for i in range(n) if i % 2 == 1])
    if r % 2 == 1:
        t = torch.ones(1)
        dist.all_reduce(t, group=odd)
        assert t.item() == len([i for i in range(n) if i % 2 == 1])

    # errors that name the call and say what to do
    expect_error(NotImplementedError, ["send", "new_group"],
                 lambda: dist.send(torch.ones(1), (r + 1) % n))
    expect_error(NotImplementedError, ["all_to_all_single"],
                 lambda: dist.all_to_all_single(torch.zeros(n), torch.zeros(n)))
    expect_error(ValueError, ["contiguous"], lambda: dist.all_reduce(torch.zeros(4, 4)[:, 0]))
    expect_error(ValueError, ["cannot reduce", "Short"],
                 lambda: dist.all_reduce(torch.zeros(2, dtype=torch.int16)))
    expect_error(NotImplementedError, ["BAND/BOR/BXOR"],
                 lambda: dist.all_reduce(torch.zeros(2, dtype=torch.int32), op=dist.ReduceOp.BAND))
    # and the group still works after them
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == n

    dist.destroy_process_group()
    print(f"rank {r}: torch backend passed ({'file store' if init_method else 'TCP store'})")


if __name__ == "__main__":
    main()
