"""The worker processes that own one device group: one process, or K at once (MGMN style).

A plain group, ``(0, 1)``, is one worker interpreter that sees those devices. A group given per
process, ``((0,), (1,))``, is K interpreters started together: process i sees only its own
devices (``CUDA_VISIBLE_DEVICES``; on CPUs as many emulated JAX devices, `device_environment`),
every process knows the whole group (``DIFFSOUP_DEVICE_GROUP``) and carries the variables
`solvers.distributed.initialize` reads for a launch of K processes, with a coordinator port of
the group's own. Each task is sent to all K; its outcome is process 0's result once all K
finished, or the error of a process that raised (named in the message).
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .._devices import Group, device_environment, group_devices, group_processes
from .._events import ErrorInfo, Outcome, OutcomeKind, Placement, Task
from .._usage import combined
from . import _messages as msg
from ._child import ChildProcess
from ._messages import Done

# The variables of a launch of K processes, as `solvers.distributed` reads them.
COORDINATOR = "DIFFSOUP_COORDINATOR"
NUM_PROCESSES = "DIFFSOUP_NUM_PROCESSES"
PROCESS_ID = "DIFFSOUP_PROCESS_ID"


def coordinator_port(avoid: Iterable[int] = ()) -> int:
    """A loopback port ``p`` with ``p`` and ``p + 1`` free (the coordinator, and ``run``'s)."""
    taken = set(avoid)
    for _ in range(100):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            if port >= 65534 or {port, port + 1, port - 1} & taken:
                continue
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise OSError("found no two consecutive free loopback ports for a group's coordinator")


def _environments(group: Group | None, port: int | None) -> list[dict[str, str]]:
    if group is None:
        return [{}]
    every = ",".join(map(str, group_devices(group)))
    processes = group_processes(group)
    envs = []
    for i, devices in enumerate(processes):
        env = {**device_environment(devices), "DIFFSOUP_DEVICE_GROUP": every}
        if len(processes) > 1:
            env.update({COORDINATOR: f"127.0.0.1:{port}", NUM_PROCESSES: str(len(processes)),
                        PROCESS_ID: str(i)})
        envs.append(env)
    return envs


@dataclass(eq=False)
class WorkerGroup:
    """The processes of one device group, and the task they run or hold. Its methods are the
    only code that changes its fields."""

    index: int
    group: Group | None
    members: list[ChildProcess]
    port: int | None = None
    start_failures: int = 0  # how many times in a row the slot's worker died before ready
    pids: dict[int, int] = field(default_factory=dict)  # member -> pid, once it is ready
    task: Task | None = None  # running (a "begin" arrived)
    held: deque[Task] = field(default_factory=deque)  # sent, not begun yet
    begun: float = 0.0
    deadline: float = float("inf")  # monotonic: past it the running task is ended
    done: dict[int, Done] = field(default_factory=dict)  # member -> its end of the task
    recalls: int = 0  # take-backs sent that the worker has not answered yet
    several: bool = field(init=False, default=False)  # more than one process
    ready: bool = field(init=False, default=False)  # every process said it is ready
    _placement: Placement | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.several = len(self.members) > 1

    @classmethod
    def spawn(cls, index: int, group: Group | None, fn_bytes: bytes, failures: int = 0,
              ports_in_use: Iterable[int] = (),
              start: Callable[[str, dict[str, str]], ChildProcess] = ChildProcess
              ) -> WorkerGroup:
        """Start the group's processes with ``start(name, env)`` and send each the pickled
        ``fn``; ``failures``: how many times in a row this slot's worker died before ready."""
        several = group is not None and len(group_processes(group)) > 1
        port = coordinator_port(ports_in_use) if several else None
        members = []
        for j, env in enumerate(_environments(group, port)):
            name = f"campaign-worker-{index}" + (f".{j}" if several else "")
            members.append(start(name, env))
            try:
                members[-1].conn.send_bytes(fn_bytes)
            except OSError:  # it died at once; the monitor sees its sentinel and replaces it
                pass
        return cls(index, group, members, port, failures)

    @property
    def name(self) -> str:
        return f"group-{self.index}" if self.several else f"proc-{self.index}"

    @property
    def devices(self) -> tuple[int, ...] | None:
        return None if self.group is None else group_devices(self.group)

    @property
    def pid(self) -> int:
        """Process 0's pid (0 until it is ready)."""
        return self.pids.get(0, 0)

    def joined(self, member: int, pid: int) -> bool:
        """Process ``member`` (pid ``pid``) is ready; True once every process is (then the
        slot's start failures are forgotten)."""
        self.pids[member] = pid
        self.ready = len(self.pids) == len(self.members)
        if self.ready:
            self.start_failures = 0
        return self.ready

    @property
    def idle(self) -> bool:
        return self.ready and self.task is None and not self.held

    def placement(self, host: str) -> Placement:
        cached = self._placement
        if cached is None or cached.pid != self.pid or cached.host != host:
            cached = self._placement = Placement(host, self.pid, self.name, self.devices)
        return cached

    def describe(self, member: int) -> str:
        """Who a member is, for messages: the worker, or one process of a group."""
        pid = self.pids.get(member) or self.members[member].pid
        if self.group is None or not self.several:
            return f"worker {self.name} (pid {pid}, device group {self.group})"
        devices = group_processes(self.group)[member]
        return (f"process {member} of {len(self.members)} (pid {pid}, devices {devices}) of "
                f"worker {self.name} (device group {self.group})")

    # ------------------------------------------------------------------ sending
    def send(self, task: Task) -> None:
        """Send ``task`` to every process; raises if it cannot be pickled."""
        payload = msg.task(task)
        self.held.append(task)
        for member in self.members:
            try:
                member.conn.send_bytes(payload)
            except OSError:  # that process is gone; the monitor replaces the group
                pass

    def ask_back(self) -> bool:
        """Ask a one-process worker for the tasks it holds and has not begun (`given_back`
        receives them); True if asked. A group of several runs what it was sent: its processes
        must all run a task or none."""
        if self.several or not self.held:
            return False
        try:
            self.members[0].conn.send_bytes(msg.TAKE_BACK)
        except OSError:  # it is gone; the monitor replaces it, and `release` gives them back
            pass
        self.recalls += 1
        return True

    def given_back(self, task_ids: list[str]) -> list[Task]:
        """The worker answered a take-back: these held tasks will not start."""
        self.recalls = max(0, self.recalls - 1)
        ids = set(task_ids)
        back = [task for task in self.held if task.task_id in ids]
        if back:
            self.held = deque(task for task in self.held if task.task_id not in ids)
        return back

    def release(self) -> tuple[list[Task], bool]:
        """The held tasks, no longer held (the worker is gone or restarts), and whether a
        take-back was pending for them (then they go back to the engine, not to the queue)."""
        held, recalled = list(self.held), self.recalls > 0
        self.held.clear()
        self.recalls = 0
        return held, recalled

    # ------------------------------------------------------------------ the running task
    def begin(self, task_id: str, begun: float, timeout: float | None) -> Task | None:
        """A process began ``task_id``: the task, if this starts it (the first process to)."""
        if self.task is None and self.held and self.held[0].task_id == task_id:
            self.task, self.begun, self.done = self.held.popleft(), begun, {}
            self.deadline = time.monotonic() + timeout if timeout else float("inf")
            return self.task
        return None

    def finished(self, member: int, done: Done, grace: float) -> bool:
        """Process ``member`` ended the running task; True once every process did. One that
        raised gives the others ``grace`` more seconds (they may wait for it in a collective)."""
        if self.task is None or self.task.task_id != done.task_id:
            return False  # a task this group no longer runs (it timed out meanwhile)
        self.done[member] = done
        if len(self.done) == len(self.members):
            return True
        if done.kind is OutcomeKind.ERROR:
            self.deadline = min(self.deadline, time.monotonic() + grace)
        return False

    def drop_task(self) -> Task | None:
        """The running task, which no longer runs here (its worker was lost, it timed out, or
        workers cannot start)."""
        task, self.task, self.deadline = self.task, None, float("inf")
        return task

    def errors(self) -> list[int]:
        return [j for j, d in sorted(self.done.items()) if d.kind is OutcomeKind.ERROR]

    def raised_meanwhile(self) -> str:
        """What the processes that raised said, for the message of a group that was lost."""
        return "".join(f"; process {j} raised meanwhile {self.done[j].value.type}: "
                       f"{self.done[j].value.message}" for j in self.errors())

    def outcome(self, host: str, note: str = "") -> Outcome:
        """The running task's outcome from what its processes sent; clears the task.

        Process 0's result when all finished without error; otherwise the error of the first
        process (by rank) that raised, naming it, the others that raised, and ``note``.
        """
        task = self.drop_task()
        assert task is not None
        where = self.placement(host)
        first = self.done.get(0)
        if not self.several and first is not None and first.kind is OutcomeKind.RESULT:
            return Outcome(task.task_id, task.attempt, OutcomeKind.RESULT, where,
                           min(first.begun, self.begun), first.ended, result=first.value,
                           usage=first.usage)  # the common case
        ends = list(self.done.values())
        begun = min([self.begun] + [d.begun for d in ends])
        finished = len(self.done) == len(self.members)
        ended = max(d.ended for d in ends) if finished else time.time()
        usage = combined([d.usage for d in ends]) if finished else None
        errors = self.errors()
        if not errors:
            return Outcome(task.task_id, task.attempt, OutcomeKind.RESULT, where, begun, ended,
                           result=self.done[0].value, usage=usage)
        error: ErrorInfo = self.done[errors[0]].value
        if self.several:
            others = errors[1:]
            also = (f"; process {others[0]} raised too" if len(others) == 1 else
                    f"; processes {others} raised too" if others else "")
            error = ErrorInfo(error.type, f"{self.describe(errors[0])} raised: {error.message}"
                              f"{also}{note}", error.traceback)
        return Outcome(task.task_id, task.attempt, OutcomeKind.ERROR, where, begun, ended,
                       error=error, usage=usage)

    def kill(self) -> None:
        """End every process of the group and release them."""
        for member in self.members:
            member.kill()
        for member in self.members:
            member.join()
            member.close()
