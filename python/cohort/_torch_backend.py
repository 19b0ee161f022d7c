"""The torch.distributed backend "cohort": registration and the creator torch calls per group.

Note [Torch version lock]
-------------------------
cohort._torch is a c10d::Backend compiled against one torch's C++ headers and linked to its
libtorch: C++ has no stable ABI across torch releases (vtables of c10d::Backend, the layout of
its options structs, the tensor API), so a module built for one torch and loaded into another
would crash or fail with a symbol error. Third-party backends hit exactly this ("Mismatch in
kernel C++ signatures"). A Python-level backend (a Python subclass of c10d::Backend, which torch
2.15 allows) would need no libtorch link and so no lock, but it costs a Python call per
collective on top of torch's own dispatch: measured here at 1 KiB on one rank (a no-op backend,
2026-12-05, load average 7), torch's built-in C++ no-op backend took 2.8 us per
dist.all_reduce and the Python one 6.1 us, while cohort's whole shared-memory all-reduce of 1 KiB
on 4 ranks takes 4.7 us. So the backend is C++ and the lock is made explicit instead: the build
records torch.__version__ and torch.version.git_version (cohort/_build_info.py), and `import
cohort` compares them with the running torch before it loads cohort._torch, raising ImportError
that names both versions and the command that rebuilds. Only cohort._torch is locked:
cohort._core links no torch (Note [Two extension modules] in python/src/bridge.hpp).
"""

import atexit
import os
import sys
from datetime import timedelta

from . import _build_info, _core

BACKEND_NAME = "cohort"
_SKIP_VARIABLE = "COHORT_SKIP_TORCH"
_REBUILD = "pip install --no-build-isolation --force-reinstall <cohort's source folder>"


def _torch_available():
    if "torch" in sys.modules:
        return True
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _check_version(torch):
    built = _build_info.TORCH_VERSION
    if not built:
        raise ImportError(
            f"cohort was built without PyTorch (none was importable when it was built), but torch "
            f"{torch.__version__} is installed now, so the backend \"cohort\" cannot be "
            f"registered. Rebuild cohort in this environment: {_REBUILD}; or set "
            f"{_SKIP_VARIABLE}=1 to use cohort without its torch backend."
        )
    running_git = getattr(torch.version, "git_version", "") or ""
    if torch.__version__ != built or (
        _build_info.TORCH_GIT_VERSION and running_git and running_git != _build_info.TORCH_GIT_VERSION
    ):
        raise ImportError(
            f"cohort's torch backend was built against torch {built} "
            f"(git {_build_info.TORCH_GIT_VERSION or 'unknown'}), but this Python runs torch "
            f"{torch.__version__} (git {running_git or 'unknown'}); a backend compiled for one "
            f"torch cannot load into another. Rebuild cohort against this torch: {_REBUILD}; or "
            f"set {_SKIP_VARIABLE}=1 to use cohort without its torch backend."
        )


def _tcp_address(store):
    """(host, port) of the TCPStore under `store`'s prefixes, or ("", 0) for other stores."""
    import torch.distributed as dist

    base = store
    try:
        base = store._underlying_non_prefix_store
    except AttributeError:
        while isinstance(base, dist.PrefixStore):
            base = base.underlying_store
    if isinstance(base, dist.TCPStore):
        return base.host, base.port
    return "", 0



def _create(options, backend_options=None):
    from . import _torch

    rank = options.group_rank
    size = options.group_size
    timeout = options.timeout
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    global_ranks = list(options.global_ranks_in_group or [])
    log_rank = global_ranks[rank] if global_ranks else rank
    host, port = _tcp_address(options.store)
    if os.environ.get("COHORT_TORCH_STORE") == "python":
        host, port = "", 0  # for tests: the path other stores take
    # Keys of this group: its torch name (unique, the same on its ranks) within the attempt.
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    prefix = f"cohort-torch/attempt{attempt}/group{options.group_id}"
    group = _core._make_group(
        options.store, host, port, prefix, rank, size, timeout, log_rank
    )
    return _torch.CohortBackend(group, timeout)


def register():
    """Registers the backend with torch.distributed when torch is installed."""
    if os.environ.get(_SKIP_VARIABLE, "") not in ("", "0"):
        return
    if not _torch_available():
        return
    import torch

    _check_version(torch)
    import torch.distributed as dist

    if not dist.is_available():
        return
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    from . import _torch

    if _torch.BRIDGE_VERSION != _core.BRIDGE_VERSION:
        raise ImportError(
            "cohort._core and cohort._torch come from different builds; reinstall cohort: "
            + _REBUILD
        )
    dist.Backend.register_backend(
        BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"]
    )
    _record_on_our_own()


def _record_on_our_own():
    """Note [torch's flight recorder and cohort's]

    torch 2.15 attaches its backend-neutral flight recorder hook (c10d::FlightRecorderHook) to
    every group whose backend is not on its list of backends that record their own collectives
    (gloo, nccl's legacy path, xccl, fake). Its pre-hook files an entry with a captured Python
    traceback for each collective, and its post-hook can only retire it at issue time for a
    backend without completion hooks, as cohort's: it never reads "completed", and without abort
    hooks nothing dumps it on a failure. It cost 1.7 us of the 5.1 us of a 1 KiB
    `dist.all_reduce` on one rank (3.4 us with TORCH_FR_BUFFER_SIZE=0; 2026-12-05), a third of the
    call, on every collective, while gloo, on the list, pays nothing. cohort records every
    collective itself (its flight recorder, and the diagnosis that names the rank and the call
    at the deadline: docs/reliability.md), so it joins that list, as gloo is on it. The list is
    torch's private set `_FR_SELF_RECORDING_BACKENDS`; where a torch has no such set, nothing is
    done.
    """
    import torch.distributed.distributed_c10d as c10d

    recording = getattr(c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if isinstance(recording, set):
        recording.add(BACKEND_NAME)


@atexit.register
def _stop_python_store_calls():
    # Threads of the library (the watchdog) must not call into a Python store object while the
    # interpreter shuts down.
    _core._interpreter_exiting()
