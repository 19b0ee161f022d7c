"""cohort: collectives for data-parallel training (docs/python.md).

Two ways in:

- ``import cohort`` registers the torch.distributed backend ``"cohort"`` (when torch is
  installed): ``dist.init_process_group("cohort")`` then runs CPU tensors over cohort's host
  transports (shared memory within a host, Gloo across hosts) and CUDA tensors over NCCL, with
  cohort's deadlines and hang reports.
- ``world = cohort.init()`` joins the ranks a launcher started (cohortrun, torchrun, srun,
  mpirun) without torch; its communicators take any DLPack array (NumPy, PyTorch, CuPy, JAX)::

      world = cohort.init()
      world.comm.all_reduce(x, "avg")            # in place; host arrays: returns when done
      world.comm.all_reduce(g, stream=s)         # CUDA arrays: enqueued on stream s
"""

# Note [One NCCL in the process]
# Built with CUDA, cohort._core links libnccl.so.2 and libcudart.so, and PyTorch's CUDA build
# brings its own copies (the nvidia-* wheels) under the same sonames: whichever loads first
# serves the whole process. PyTorch needs the symbols of its own, newer NCCL (torch 2.15 against
# the toolkit's NCCL 2.28 fails to import: undefined symbol ncclCommResume), while cohort uses
# only NCCL 2's stable API, so torch is imported before cohort's extension whenever it is
# installed and not turned off: cohort's collectives then run on the NCCL torch's run on.
import importlib.util as _importlib_util
import os as _os

if _os.environ.get("COHORT_SKIP_TORCH", "") in ("", "0") and (
    _importlib_util.find_spec("torch") is not None
):
    import torch as _pytorch  # noqa: F401  (not `_torch`: that is the extension cohort._torch)

    del _pytorch

from ._core import (
    BRIDGE_VERSION as _BRIDGE_VERSION,
    Communicator,
    Error,
    InvalidArgument,
    TimeoutError,
    Work,
    World,
    __version__,
    built_with_cuda,
)
from ._core import init as _init


def init(timeout=None, backend="auto", host_transport=None):
    """Joins the world this process was launched into: every rank must call it.

    timeout: seconds (or a timedelta) for forming the world and for every collective; default
    COHORT_TIMEOUT, else 10 minutes. backend: "auto" (NCCL when this process sees a GPU and
    cohort was built with CUDA), "nccl" or "host". host_transport: "auto" (shared memory within
    a host, Gloo across), "shm" or "gloo"; default COHORT_HOST_TRANSPORT.
    """
    return _init(timeout=timeout, backend=backend, host_transport=host_transport)


from . import _torch_backend  # noqa: E402

_torch_backend.register()

__all__ = [
    "Communicator",
    "Error",
    "InvalidArgument",
    "TimeoutError",
    "Work",
    "World",
    "__version__",
    "built_with_cuda",
    "init",
]
