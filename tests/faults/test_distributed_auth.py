"""Nobody joins distributed.run's TCP transport, or runs code through it, without the job's secret.

Real sockets from separate processes against a real two-process fit: a crafted pickle that
would create a marker file, sent before and while the real worker connects; a peer with another
secret; a listener that cannot prove the secret to a worker; the addresses the sockets bind.
"""

from __future__ import annotations

import os
import pickle
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from testkit import PYTHON, ROOT, require

sys.path.insert(0, str(ROOT / "tests" / "distributed"))
from distkit import FIT, assert_same_fit, env, free_coordinator, read, run  # noqa: E402

from solvers.distributed import _auth  # noqa: E402

#: A local process that knows the transport's framing: it connects to ``host:port`` and sends a
#: pickle that, once unpickled, creates ``marker``; "eager" sends at once, "hold" first reads
#: the challenge, writes ``hold.connected`` and waits for the file ``go``; "self" unpickles the
#: payload itself (the control: the payload works). It writes ``<mode>.json``: its own address
#: and how its connection ended.
ATTACKER = r"""
import json, pickle, socket, sys, time
from pathlib import Path
host, port, marker, out, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), \
    sys.argv[5]

class Touch:
    def __reduce__(self):
        return (open, (marker, "w"))

data = pickle.dumps(Touch())
if mode == "self":
    pickle.loads(data)
    sys.exit(0)
payload = len(data).to_bytes(8, "big") + data
deadline = time.monotonic() + 200
while True:
    try:
        sock = socket.create_connection((host, port), timeout=5)
        break
    except OSError:
        assert time.monotonic() < deadline, "nothing listens"
        time.sleep(0.05)
local = "%s:%d" % sock.getsockname()[:2]
sock.settimeout(200)
if mode == "hold":
    sock.recv(64)
    (out / "hold.connected").write_text(local)
    while not (out / "go").exists():
        time.sleep(0.05)
try:
    sock.sendall(payload)
    while sock.recv(65536):
        pass
    ending = "closed"
except OSError as exc:
    ending = type(exc).__name__
(out / f"{mode}.json").write_text(json.dumps({"local": local, "ending": ending}))
"""

#: A worker of rank argv[3] of argv[4] processes with the secret argv[5]; it then receives.
PEER = ("import sys; from solvers.distributed._tcp import TcpTransport; "
        "t = TcpTransport(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), "
        "secret=sys.argv[5].encode(), connect_timeout=200); print('joined', t.receive())")

#: How a connection that was dropped ends for the peer (closed, or reset with bytes unread).
DROPPED = {"closed", "ConnectionResetError", "BrokenPipeError"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The one-process fit."""
    out = tmp_path_factory.mktemp("one")
    run([PYTHON, str(FIT), str(out)])
    return read(out / "fit.json")


class Job:
    """The fit's two processes started by hand, as a launcher would, and the attackers."""

    def __init__(self, out: Path):
        self.out, self.coordinator = out, free_coordinator()
        host, port = self.coordinator.rsplit(":", 1)
        self.host, self.port = host, int(port) + 1          # the transport's port
        self.procs: dict[str, subprocess.Popen] = {}
        self.script = out / "attacker.py"
        self.script.write_text(ATTACKER)

    def start(self, rank: int, extra: dict[str, str]) -> subprocess.Popen:
        child = {**env(), "DIFFSOUP_COORDINATOR": self.coordinator,
                 "DIFFSOUP_NUM_PROCESSES": "2", "DIFFSOUP_PROCESS_ID": str(rank), **extra}
        with open(self.out / f"stderr.{rank}", "w") as err:
            self.procs[f"rank{rank}"] = subprocess.Popen([PYTHON, str(FIT), str(self.out)],
                                                         env=child, stderr=err, cwd=ROOT)
        return self.procs[f"rank{rank}"]

    def attack(self, mode: str, marker: Path) -> subprocess.Popen:
        self.procs[mode] = subprocess.Popen(
            [PYTHON, str(self.script), self.host, str(self.port), str(marker), str(self.out),
             mode], env=env(), cwd=ROOT)
        return self.procs[mode]

    def wait(self, name: str, timeout: float = 240) -> int:
        return self.procs[name].wait(timeout=timeout)

    def stderr(self, rank: int) -> str:
        return (self.out / f"stderr.{rank}").read_text()

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def wait_for(path: Path, proc: subprocess.Popen, seconds: float = 200) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, f"{proc.args} exited {proc.returncode} before {path}"
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.05)


def listening(proc: subprocess.Popen, port: int, seconds: float = 200) -> set[tuple[str, int]]:
    """The addresses ``proc`` listens on at ``port``, once it listens there."""
    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, f"{proc.args} exited {proc.returncode}"
        found = {(c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)  # gRPC: IPv4-mapped
                 for c in psutil.Process(proc.pid).net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
        if found:
            return found
        assert time.monotonic() < deadline, f"{proc.args} never listened on port {port}"
        time.sleep(0.05)


def connected(proc: subprocess.Popen, port: int, seconds: float = 200) -> None:
    """Wait until ``proc`` has a connection to ``port``."""
    deadline = time.monotonic() + seconds
    while not any(c.raddr and c.raddr.port == port
                  for c in psutil.Process(proc.pid).net_connections("tcp")):
        assert proc.poll() is None, f"{proc.args} exited {proc.returncode}"
        assert time.monotonic() < deadline, f"{proc.args} never connected to port {port}"
        time.sleep(0.02)


def non_loopback_address() -> str | None:
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


@pytest.mark.slow
def test_crafted_pickles_before_and_while_the_worker_joins_run_nothing(reference, tmp_path):
    secret = secrets.token_hex(32)
    secret_file = tmp_path / "secret"      # process 1 reads the same secret from a private file
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    marker, control = tmp_path / "marker", tmp_path / "control"
    with Job(tmp_path) as job:
        job.attack("self", control)
        assert job.wait("self") == 0 and control.exists()   # unpickled, the payload runs
        zero = job.start(0, {"DIFFSOUP_SECRET": secret})
        assert listening(zero, job.port) == {("127.0.0.1", job.port)}
        job.attack("eager", marker)                          # before the worker connects
        assert job.wait("eager") == 0
        job.attack("hold", marker)                           # connected while the worker joins
        wait_for(tmp_path / "hold.connected", job.procs["hold"])
        one = job.start(1, {"DIFFSOUP_SECRET_FILE": str(secret_file)})
        connected(one, job.port)
        (tmp_path / "go").touch()
        assert job.wait("rank0") == 0, job.stderr(0)[-3000:]
        assert job.wait("rank1") == 0, job.stderr(1)[-3000:]
        assert job.wait("hold") == 0
    assert not marker.exists()
    assert_same_fit(read(tmp_path / "fit.json")["tr"], reference["tr"])
    log = job.stderr(0)
    for mode in ("eager", "hold"):
        attacker = read(tmp_path / f"{mode}.json")
        assert attacker["ending"] in DROPPED, attacker
        assert f"WARNING solvers.distributed._tcp: refused the connection from " \
               f"{attacker['local']} to the run() transport on 127.0.0.1:{job.port}" in log, log
    assert "it did not prove the job's secret; it was closed unread" in log


@pytest.mark.slow
def test_a_peer_with_another_secret_is_refused_and_the_worker_still_joins(reference, tmp_path):
    secret = secrets.token_hex(32)
    with Job(tmp_path) as job:
        zero = job.start(0, {"DIFFSOUP_SECRET": secret})
        listening(zero, job.port)
        wrong = subprocess.run([PYTHON, "-c", PEER, job.host, str(job.port), "1", "2",
                                secrets.token_hex(32)], env=env(), cwd=ROOT, capture_output=True,
                               text=True, timeout=240, check=False)
        assert wrong.returncode != 0 and "joined" not in wrong.stdout
        assert (f"ConnectionError: process 1: process 0 at 127.0.0.1:{job.port} refused this "
                "process's proof of the job's secret") in wrong.stderr, wrong.stderr[-3000:]
        job.start(1, {"DIFFSOUP_SECRET": secret})            # the real process 1, afterwards
        assert job.wait("rank0") == 0, job.stderr(0)[-3000:]
        assert job.wait("rank1") == 0, job.stderr(1)[-3000:]
    assert_same_fit(read(tmp_path / "fit.json")["tr"], reference["tr"])
    assert "refused the connection from 127.0.0.1:" in job.stderr(0)
    assert "it did not prove the job's secret" in job.stderr(0)


class _Touch:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_worker_refuses_a_listener_that_cannot_prove_the_secret(tmp_path):
    """A fake process 0 answers with a made-up proof and then a crafted pickle: not read."""
    marker = tmp_path / "marker"
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        seen: list[bytes] = []

        def fake() -> None:
            conn, _ = server.accept()
            with conn:
                conn.sendall(_auth.challenge()[0])
                seen.append(conn.recv(4096))
                data = pickle.dumps(_Touch(str(marker)))
                try:
                    conn.sendall(os.urandom(_auth.PROOF_SIZE) + len(data).to_bytes(8, "big")
                                 + data)
                    conn.recv(1)                 # until the worker hangs up
                except OSError:                  # reset: it hung up with our bytes unread
                    pass

        thread = threading.Thread(target=fake, daemon=True)
        thread.start()
        worker = subprocess.run([PYTHON, "-c", PEER, "127.0.0.1", str(port), "1", "2",
                                 secrets.token_hex(32)], env=env(), cwd=ROOT,
                                capture_output=True, text=True, timeout=240, check=False)
        thread.join(60)
    assert seen and len(seen[0]) == _auth.ANSWER_SIZE     # it answered our challenge, then
    assert worker.returncode != 0 and "joined" not in worker.stdout
    assert "did not prove the job's secret" in worker.stderr, worker.stderr[-3000:]
    assert not marker.exists()


@pytest.mark.parametrize("which", ["transport", "coordinator"])
def test_sockets_bind_the_given_host_only(tmp_path, which):
    """Loopback was given: listening on 127.0.0.1, unreachable at the machine's other address."""
    other = non_loopback_address()
    require(other is not None, "this machine has no non-loopback IPv4 address to connect to")
    port = int(free_coordinator().rsplit(":", 1)[1])
    code = {"transport": "from solvers.distributed._tcp import TcpTransport; TcpTransport("
                         "'127.0.0.1', {port}, 0, 2, secret=b'x' * 32, connect_timeout=300)",
            "coordinator": "from solvers.distributed import initialize; "
                           "initialize('127.0.0.1:{port}', 2, 0, timeout=300)"}[which]
    proc = subprocess.Popen([PYTHON, "-c", code.format(port=port)], env=env(), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert listening(proc, port) == {("127.0.0.1", port)}      # not 0.0.0.0 nor [::]
        socket.create_connection(("127.0.0.1", port), timeout=30).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((other, port), timeout=30)
    finally:
        proc.kill()
        proc.wait()


def test_without_a_secret_the_transport_refuses_to_start_and_says_how(tmp_path):
    child = {**env(), "DIFFSOUP_COORDINATOR": free_coordinator(), "DIFFSOUP_NUM_PROCESSES": "2",
             "DIFFSOUP_PROCESS_ID": "0"}
    done = subprocess.run([PYTHON, str(FIT), str(tmp_path)], env=child, cwd=ROOT,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode != 0
    assert ("ValueError: distributed.run() over TCP in a job with the launcher's variables of 2 "
            "processes needs the job's secret") in done.stderr, done.stderr[-3000:]
    assert "export DIFFSOUP_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))')" \
        in done.stderr
    assert not (tmp_path / "fit.json").exists()


def test_secret_file_must_be_private_and_secrets_long(tmp_path):
    path = tmp_path / "secret"
    path.write_text("s" * 40)
    path.chmod(0o644)
    with pytest.raises(ValueError, match=r"mode 644: other users could read .*\(chmod 600"):
        _auth.job_secret({_auth.SECRET_FILE: str(path)}, "an srun step of 2 processes")
    path.chmod(0o600)
    assert _auth.job_secret({_auth.SECRET_FILE: str(path)}, "x") == b"s" * 40
    with pytest.raises(ValueError, match="has 5 characters, fewer than 32"):
        _auth.job_secret({_auth.SECRET: "short"}, "x")
    with pytest.raises(ValueError, match="cannot be read"):
        _auth.job_secret({_auth.SECRET_FILE: str(tmp_path / "absent")}, "x")


def test_proofs_do_not_replay_reflect_or_cross_jobs():
    key, ctx = b"k" * 32, _auth.context(5000, 2)
    message, n0 = _auth.challenge()
    answer, (m0, n1) = _auth.answer(key, ctx, message, 1)
    assert m0 == n0 and _auth.check_answer(key, ctx, n0, answer) == (1, n1)
    fresh = _auth.challenge()[1]                                  # a replay on a new connection
    assert _auth.check_answer(key, ctx, fresh, answer) is None
    assert _auth.check_answer(b"w" * 32, ctx, n0, answer) is None  # another secret
    assert _auth.check_answer(key, _auth.context(5002, 2), n0, answer) is None  # another job
    forged = answer[:-8] + (2).to_bytes(8, "big")                 # another rank, same digest
    assert _auth.check_answer(key, ctx, n0, forged) is None
    proof = _auth.proof(key, ctx, n0, n1, 1)
    assert _auth.check_proof(key, ctx, n0, n1, 1, proof)
    assert not _auth.check_proof(key, ctx, n0, n1, 1, answer[32:64])  # the worker's own digest
    with pytest.raises(ValueError, match="not process 0's challenge"):
        _auth.answer(key, ctx, b"\x80\x05" + b"x" * (_auth.CHALLENGE_SIZE - 2), 1)
    assert len(_auth.new_secret()) == 64 and _auth.new_secret() != _auth.new_secret()
