"""Forked worker processes that analyse one file at a time and can be stopped
in the middle of one.

Jobs are drawn from an iterator as the workers need them, so the run goes on
finding the next (reading files, ruling most out by their text) while the
first are analysed; a job goes to its worker down a pipe and the result comes
back up another.  A worker is forked when a job waits and none is free, up to
`count`.  The run watches every worker: one that dies (libcst's native parser
overflowing its stack, the OOM killer) costs only the job it was on, and one
still on a job past its deadline (each job's own) is killed, which the analysis's own
alarm cannot do while native code runs.  A new worker takes over from either.

The first worker may be forked before the run exists (start_early_worker, as
the command starts: amplint/launch.py), to load what analysing needs while
the command line loads and finds the files; the first run takes it over.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import selectors
import signal
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, Iterator, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")

_LENGTH_BYTES = 8
_NO_JOB = object()


@dataclass(frozen=True)
class Lost:
    """A job whose worker died, or was stopped past the deadline (`overdue`):
    what happened, in words."""

    why: str
    overdue: bool = False


@dataclass
class _Worker:
    """A worker process, its pipes and the job it is on."""

    pid: int
    jobs: int  # the run writes job indices here
    results: int  # and reads results here
    job: int | None = None
    started: float = 0.0
    due: float | None = None  # when the job it is on is overdue


class Workers(Generic[Job, Result]):
    """`analyse` applied to each of `jobs` in up to `count` forked workers."""

    def __init__(
        self,
        jobs: Iterable[Job],
        analyse: Callable[[Job], Result],
        count: int,
        deadline: Callable[[Job], float] | None,
        *,
        before_fork: Callable[[], None] | None = None,
    ) -> None:
        """`deadline` says how many seconds a job may run (its file's own
        limit); `before_fork`, called before this run forks its first worker,
        loads what they all need (an early worker loaded it itself)."""
        self._source = iter(jobs)
        self._before_fork = before_fork
        self._more = True  # whether `_source` may hold more
        self._drawn = 0  # jobs taken from it; a result names its job by this count
        self._analyse = analyse
        self._count = max(1, count)
        self._deadline = deadline
        self._pending: deque[tuple[int, Job]] = deque()
        self._workers: dict[int, _Worker] = {}  # by the descriptor results arrive on
        self._selector = selectors.DefaultSelector()

    def results(self) -> Iterator[tuple[int, Result | Lost]]:
        """(index, result) for every job, in the order they finish; the index
        counts the jobs as drawn from `jobs`, from 0."""
        try:
            self._draw()
            early = _take_early_worker()
            if early is not None:
                self._workers[early.results] = early
                self._selector.register(early.results, selectors.EVENT_READ)
                self._give_next(early)
            while self._pending or self._workers:
                if self._pending and len(self._workers) < self._count:
                    self._give_next(self._start())
                    continue
                # With every worker busy, the next job is found meanwhile.
                ahead = self._more and not self._pending
                for key, _ in self._selector.select(0 if ahead else self._time_left()):
                    yield from self._receive(self._workers[key.fd])
                yield from self._stop_overdue()
                if ahead:
                    self._draw()
        finally:
            for worker in list(self._workers.values()):
                self._end(worker, kill=True)
            self._selector.close()

    def _draw(self) -> None:
        """The next job from `jobs` into the queue, if there is one."""
        if not self._more:
            return
        job = next(self._source, _NO_JOB)
        if job is _NO_JOB:
            self._more = False
            return
        self._pending.append((self._drawn, job))
        self._drawn += 1

    # -- the run's side ---------------------------------------------------------
    def _start(self) -> _Worker:
        if self._before_fork is not None:
            self._before_fork()
            self._before_fork = None
        worker = _fork(lambda: self._analyse, close=list(self._workers.values()))
        self._workers[worker.results] = worker
        self._selector.register(worker.results, selectors.EVENT_READ)
        return worker

    def _give_next(self, worker: _Worker) -> None:
        if not self._pending:
            self._draw()
        if not self._pending:
            # Killed, not left to read the end of its pipe: an early worker
            # may still be loading, and the run would wait for it.
            self._end(worker, kill=True)
            return
        worker.job, job = self._pending.popleft()
        worker.started = time.monotonic()
        worker.due = None if self._deadline is None else worker.started + self._deadline(job)
        data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            _write_all(worker.jobs, len(data).to_bytes(_LENGTH_BYTES, "little") + data)
        except BrokenPipeError:
            pass  # it died before reading: its end of the results pipe says so

    def _receive(self, worker: _Worker) -> Iterator[tuple[int, Result | Lost]]:
        data = _read_message(worker.results)
        job = worker.job
        if data is None:  # it died
            status = self._end(worker, kill=False)
            if job is not None:
                yield job, Lost(_death(status))
            return  # a new worker takes the jobs left, if any
        worker.job = None
        yield job, pickle.loads(data)
        self._give_next(worker)

    def _busy(self) -> list[_Worker]:
        """The workers on a job that has a deadline."""
        return [w for w in self._workers.values() if w.job is not None and w.due is not None]

    def _time_left(self) -> float | None:
        dues = [worker.due for worker in self._busy()]
        return max(0.0, min(dues) - time.monotonic()) if dues else None

    def _stop_overdue(self) -> Iterator[tuple[int, Result | Lost]]:
        now = time.monotonic()
        for worker in self._busy():
            if now >= worker.due:
                job, allowed = worker.job, worker.due - worker.started
                self._end(worker, kill=True)
                yield job, Lost(f"took longer than {allowed:g} s", overdue=True)

    def _end(self, worker: _Worker, kill: bool) -> int:
        """Stop watching `worker` and reap it (see _reap)."""
        self._selector.unregister(worker.results)
        del self._workers[worker.results]
        return _reap(worker, kill)


# The worker forked as the command started, until a run takes it.
_early: _Worker | None = None


def start_early_worker(load: Callable[[], Callable[[Job], Result]]) -> None:
    """Fork the first worker now: it calls `load` (importing what analysing
    needs) and then analyses with the function `load` returns the jobs of
    the first run that starts, whose jobs therefore carry all they need."""
    global _early
    if _early is None:
        _early = _fork(load, close=[])


def release_early_worker() -> None:
    """Stop the early worker if no run took it (nothing needed analysing)."""
    global _early
    if _early is not None:
        worker, _early = _early, None
        _reap(worker, kill=True)


def _reap(worker: _Worker, kill: bool) -> int:
    """Close `worker`'s pipes (so it exits, if it is reading), killing it
    first where asked, and wait for it: its exit status."""
    if kill:
        try:
            os.kill(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.close(worker.jobs)
    os.close(worker.results)
    _, status = os.waitpid(worker.pid, 0)
    return status


def _take_early_worker() -> _Worker | None:
    global _early
    worker, _early = _early, None
    return worker


def _fork(load: Callable[[], Callable], close: list[_Worker]) -> _Worker:
    """A worker process serving `load()`; `close` are the other workers,
    whose pipes must end when they do."""
    to_worker, jobs = os.pipe()
    results, from_worker = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(jobs)
        os.close(results)
        for other in close:
            os.close(other.jobs)
            os.close(other.results)
        _serve(to_worker, from_worker, load)
    os.close(to_worker)
    os.close(from_worker)
    return _Worker(pid, jobs, results)


# -- the worker's side ----------------------------------------------------------
def _serve(jobs: int, results: int, load: Callable[[], Callable]) -> None:
    """The worker: results go down the pipe, nothing else leaves it."""
    status = 0
    # A death here is reported by the run in one line naming the file; a
    # stack dump of it (pytest, or python -X faulthandler, turns the
    # handler on) reads like a failure of amplint's own.
    faulthandler.disable()
    try:
        analyse = load()
        while (job := _read_message(jobs)) is not None:
            result = analyse(pickle.loads(job))
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            _write_all(results, len(data).to_bytes(_LENGTH_BYTES, "little") + data)
    except BaseException:  # Ctrl-C while loading among them: the run reports it
        status = 1
    finally:
        os._exit(status)  # no atexit handlers, no flushing the run's buffers


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"died ({signal.Signals(os.WTERMSIG(status)).name})"
    return f"died (exit status {os.WEXITSTATUS(status)})"


def _read_message(descriptor: int) -> bytes | None:
    header = _read_exactly(descriptor, _LENGTH_BYTES)
    if len(header) < _LENGTH_BYTES:
        return None
    length = int.from_bytes(header, "little")
    data = _read_exactly(descriptor, length)
    return data if len(data) == length else None


def _read_exactly(descriptor: int, size: int) -> bytes:
    """`size` bytes, or fewer where the pipe ended first."""
    chunks, got = [], 0
    while got < size:
        chunk = os.read(descriptor, min(size - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]
