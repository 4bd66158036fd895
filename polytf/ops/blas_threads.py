"""Single-threaded BLAS for the numpy references that run beside generated kernels.

numpy's OpenBLAS keeps its worker threads spinning for a while after each call. When a
reference (``np.matmul`` inside an op's reference code) runs in the same process just
before a parallel polytf kernel is timed, those spinning workers share the cores with the
kernel's OpenMP threads, and every barrier of the kernel waits for a time slice: on a
2-core machine a 1.3 ms MatMul was measured at 9 ms. References are therefore evaluated
with BLAS limited to one thread, so its workers never wake up. Where threadpoolctl is not
installed this is a no-op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit numpy's BLAS to one thread inside the ``with`` block (threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: only timing quality depends on it
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield
