"""Embarrassingly parallel loops on one engine: this process, local workers, or a dask cluster.

The sweeps of the analyses (``p2pem tradeoff``'s seeds x epsilons, the leakage estimates,
the whole-run attack grid) are lists of independent tasks, each with its own seed; they run
through :meth:`Workers.map`, which hands them to joblib:

* ``Workers(jobs=1)``: one after the other in this process (no joblib involved);
* ``Workers(jobs=N)``: N local worker processes (joblib's loky backend; every worker's BLAS
  limited to its share of the cores);
* ``Workers(backend="dask", scheduler="tcp://host:8786")``: the workers of a dask.distributed
  cluster (``pip install -e ".[cluster]"`` on every machine, with the same p2pem), through
  joblib's dask backend; without a scheduler address a local cluster of ``jobs`` worker
  processes is started for the run.

Because every task draws only from its own seed, the results are the same bits whatever
runs them, in the order of the tasks; the tests compare a dask ``LocalCluster`` with the
local run.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from p2pem.errors import ConfigError

__all__ = ["BACKENDS", "Workers", "add_options", "from_args"]

T = TypeVar("T")
R = TypeVar("R")

#: Where the tasks run: "local" (this machine's processes) or "dask" (a dask.distributed cluster).
BACKENDS = ("local", "dask")


@dataclass(frozen=True)
class Workers:
    """Where a sweep's tasks run (see the module docstring).

    Parameters
    ----------
    jobs : int, default 1
        Local worker processes (``backend="local"``), or of the local cluster started when
        ``backend="dask"`` has no ``scheduler``.
    backend : {"local", "dask"}
    scheduler : str, optional
        Address of a running dask.distributed scheduler (``tcp://host:8786``).
    """

    jobs: int = 1
    backend: str = "local"
    scheduler: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise ConfigError(f"--jobs must be an integer >= 1, got {self.jobs!r}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.scheduler is not None and self.backend != "dask":
            raise ConfigError("--scheduler is the address of a dask scheduler: it needs --backend dask")

    @property
    def parallel(self) -> bool:
        """Whether the tasks leave this process."""
        return self.backend == "dask" or self.jobs > 1

    def describe(self) -> str:
        """One line for the logs: where the tasks run."""
        if self.backend == "dask":
            return f"dask scheduler {self.scheduler}" if self.scheduler else f"a local dask cluster of {self.jobs} workers"
        return "this process" if self.jobs == 1 else f"{self.jobs} local worker processes"

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], *, progress: Callable[[int, int], None] | None = None) -> list[R]:
        """``[fn(t) for t in tasks]``, run where this says, results in the order of ``tasks``.

        ``fn`` must be a module-level function (or a ``functools.partial`` of one) so that
        workers can import it; ``progress(done, total)`` is called here as results arrive.
        Library warnings in the workers are dropped: the caller reports what matters once.
        """
        total = len(tasks)
        out: list[R] = []
        if not self.parallel:
            for task in tasks:
                out.append(fn(task))
                if progress is not None:
                    progress(len(out), total)
            return out
        import joblib  # here: only a parallel sweep needs it (start-up time of every other command)

        with self._backend():
            parallel = joblib.Parallel(n_jobs=-1 if self.backend == "dask" else self.jobs, return_as="generator")
            for result in parallel(joblib.delayed(_quiet)(fn, task) for task in tasks):
                out.append(result)
                if progress is not None:
                    progress(len(out), total)
        return out

    @contextlib.contextmanager
    def _backend(self) -> Iterator[None]:
        if self.backend == "local":
            yield
            return
        try:
            import joblib
            from distributed import Client, LocalCluster  # here: an optional dependency (the cluster extra)
        except ImportError:
            raise ConfigError('--backend dask needs dask.distributed: pip install -e ".[cluster]"') from None
        with contextlib.ExitStack() as stack:
            if self.scheduler is None:
                cluster = stack.enter_context(LocalCluster(n_workers=self.jobs, threads_per_worker=1, processes=True, dashboard_address=None))
                client = stack.enter_context(Client(cluster))
            else:
                try:
                    client = stack.enter_context(Client(self.scheduler, timeout="10s"))
                except (OSError, TimeoutError) as exc:
                    raise ConfigError(f"--scheduler {self.scheduler}: cannot reach the dask scheduler ({exc})") from None
            stack.enter_context(joblib.parallel_config(backend="dask", wait_for_workers_timeout=30))
            del client
            yield


def _quiet(fn: Callable[[T], R], task: T) -> R:
    """``fn(task)`` in a worker, its library warnings dropped (the parent reports them once)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        return fn(task)


def add_options(parser: Any) -> None:
    """``-j/--jobs``, ``--backend`` and ``--scheduler`` on a command that runs a sweep."""
    parser.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1: run here)")
    parser.add_argument(
        "--backend", choices=BACKENDS, default="local",
        help="local: --jobs processes on this machine; dask: the workers of a dask.distributed cluster "
        '(pip install -e ".[cluster]"), at --scheduler or a local cluster of --jobs workers',
    )
    parser.add_argument("--scheduler", metavar="ADDRESS", help="dask scheduler address, e.g. tcp://10.0.0.5:8786 (with --backend dask)")


def from_args(args: Any) -> Workers:
    """The :class:`Workers` of a command's ``--jobs``, ``--backend`` and ``--scheduler``."""
    return Workers(jobs=args.jobs, backend=args.backend, scheduler=args.scheduler)
