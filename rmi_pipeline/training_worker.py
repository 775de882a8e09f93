"""The warm training program: torch and Lightning imported once, then one forked training program per candidate.

    python -m rmi_pipeline.training_worker           (candidate_model's command by default; never by hand)
    python -m rmi_pipeline.training_worker --stop    stops the warm workers of RMI_HOME

Starting the training program cold costs seconds of imports per candidate (Lightning alone pulls in torch._dynamo,
scipy.signal, torchmetrics and transformers), most of what a cycle spends outside compute. So the launcher's command
is this module's client instead: it connects to the warm worker of this home and environment (starting one if none
answers), hands over its environment, working folder and standard streams, and waits. The worker forks a child that
runs `train_candidate.main()` with them: every candidate still trains in a process of its own, outside the Dagster
run, with the Pipes context in its environment; only the imported modules are shared, copy on write. The worker
itself never runs torch (no threads, no CUDA before a fork). What a fork cannot share (polars and pyarrow start
threads when imported) a spare child imports while the worker is idle: the next client's program starts from it.

The client exits with the child's status; SIGINT or SIGTERM to the client goes to the child; a client that dies
takes its child with it (the worker sees its connection close). The worker exits when idle for
RMI_TRAINING_WORKER_IDLE_SECONDS, when its folder is gone, or on --stop. Whatever keeps the warm path from working
(a worker that does not start, CUDA already initialized) runs the training program cold in the client instead:
slower, never different. Multi-process training (DDP) is launched cold by the launcher: Lightning starts the other
processes from the command line.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

COLD = [sys.executable, "-m", "rmi_pipeline.train_candidate"]
COMMAND = [sys.executable, "-m", "rmi_pipeline.training_worker"]  # the client: what the launcher runs
FOLDER = "RMI_TRAINING_WORKER_DIR"  # set by the launcher: RMI_HOME/training_worker (pid and log files)
IDLE = "RMI_TRAINING_WORKER_IDLE_SECONDS"  # set by the launcher from the settings
# not polars or pyarrow: they start threads (an out-of-core cleaner, jemalloc's) when imported, and a fork copies
# none of them, with whatever locks they hold; the spare child imports them after its fork (0.4 s), and
# pyarrow.compute, which the first encoding of rows imports (50 ms)
SPARE_IMPORTS = ("polars", "pyarrow.parquet", "pyarrow.compute")
PRELOAD = ("torch", "lightning", "fsspec", "rmi_pipeline.train_candidate", "rmi_pipeline.ml.train",
           "rmi_pipeline.ml.objective", "rmi_pipeline.ml.rl", "rmi_pipeline.ml.lit_gpt", "rmi_pipeline.settings")
# environment read when modules load (threads, devices, paths): a worker serves only clients that agree on these
SHAPING = ("OMP_", "MKL_", "OPENBLAS_", "CUDA_", "PYTORCH_", "TORCH", "NCCL_", "PYTHON", "LD_", "HF_",
           "TRANSFORMERS_", "POLARS_", "ARROW_", "RMI_RECIPE", "PATH", "VIRTUAL_ENV", FOLDER)
SET_BY_IMPORTS = ("TORCHINDUCTOR_CACHE_DIR", "PYTORCH_NVML_BASED_CUDA_CHECK")  # torch and Lightning set these
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # what Dagster sends a run's training program to stop it
START_SECONDS = 180.0  # a worker that has not answered by then is given up on: the client trains cold


def worker_key(env: dict[str, str]) -> str:
    """Which worker serves a client: the interpreter, the code as it stands on disk, the shaping environment."""
    code = Path(__file__).parent
    stamp = max(p.stat().st_mtime_ns for p in code.rglob("*.py"))
    shaping = sorted((k, v) for k, v in env.items() if k.startswith(SHAPING) and k not in SET_BY_IMPORTS)
    return hashlib.sha256(json.dumps([sys.executable, str(code), stamp, shaping]).encode()).hexdigest()[:16]


def socket_path(key: str) -> str:
    """In a folder of the temporary one that only this user may enter (a Unix socket's path may hold about 100
    characters, an RMI_HOME more): no one else can listen there and receive a client's environment, its secrets."""
    folder = os.path.join(tempfile.gettempdir(), f"rmi-training-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    found = os.lstat(folder)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise OSError(f"{folder} is not a folder of this user's alone")
    return os.path.join(folder, f"{key}.sock")


# messages: a 4-byte length, then JSON

def _send(conn: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    frame = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(conn, [frame], fds)
    else:
        conn.sendall(frame)


def _receive(conn: socket.socket, with_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (None when the other side closed), and the file descriptors sent with it."""
    head, fds = b"", []
    while len(head) < 4:
        if with_fds and not fds:
            chunk, fds, _, _ = socket.recv_fds(conn, 4 - len(head), with_fds)
        else:
            chunk = conn.recv(4 - len(head))
        if not chunk:
            return None, fds
        head += chunk
    size, body = struct.unpack("!I", head)[0], b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


# the client: what the launcher runs

def client() -> int:
    env = dict(os.environ)
    child, caught = None, []

    def forward(signum, _frame):  # a signal before the child is known is kept and sent once it is
        if child is None:
            caught.append(signum)
        else:
            _end(child, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        conn = _connect(env)
    except OSError as exc:
        return _cold(f"no warm training worker ({exc})", caught)
    _send(conn, {"env": env, "cwd": os.getcwd()}, [0, 1, 2])
    reply, _ = _receive(conn)
    if not reply or "pid" not in reply:
        return _cold((reply or {}).get("cold", "the warm training worker closed the connection"), caught)
    child = reply["pid"]  # Python runs signal handlers between statements: each signal is sent once
    for signum in caught:
        _end(child, signum)
    reply, _ = _receive(conn)  # a signal's handler runs and the read goes on (PEP 475)
    if reply is None:  # the worker died under its child
        print("training worker: lost the worker while training", file=sys.stderr)
        return 1
    return reply["exit"]


def _cold(reason: str, caught: list[int]) -> int:
    if caught:  # stopped before any training began
        print(f"training worker: stopped by signal {caught[0]} before training", file=sys.stderr)
        return 128 + caught[0]
    print(f"training worker: {reason}; training cold instead", file=sys.stderr, flush=True)
    os.execv(COLD[0], COLD)


def _connect(env: dict[str, str]) -> socket.socket:
    """The connection to this environment's worker, started if none answers (one start at a time per key)."""
    import fcntl

    key = worker_key(env)
    path = socket_path(key)
    try:
        return _open(path)
    except OSError:
        pass
    folder = Path(env[FOLDER])
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _open(path)
        except OSError:
            pass
        with open(folder / f"{key}.log", "ab") as log:
            worker = subprocess.Popen([*COMMAND, "--serve", path],
                                      env={k: v for k, v in env.items() if not k.startswith("DAGSTER_PIPES_")},
                                      stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise OSError(f"the worker exited with {worker.returncode}: see {folder / f'{key}.log'}")
            try:
                return _open(path)
            except OSError:
                time.sleep(0.05)
        raise OSError(f"the worker did not answer within {START_SECONDS:.0f} s")


def _open(path: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        raise
    return conn


# the worker

def serve(path: str) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when torch loads its OpenMP: as the program
    for name in PRELOAD + ((os.environ.get("RMI_RECIPE", "").partition(":")[0],) if os.environ.get("RMI_RECIPE")
                           else ()):
        importlib.import_module(name)
    folder = Path(os.environ[FOLDER])
    idle_seconds = float(os.environ[IDLE])
    pid_file = folder / (Path(path).stem + ".pid")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(path)  # a worker that died left its socket
    except FileNotFoundError:
        pass
    listener.bind(path)
    listener.listen(16)
    _status(pid_file, path, None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"training worker {os.getpid()} ready on {path}", flush=True)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # child pid -> its client's connection
    spare: _Spare | None = None
    spares = True  # until a spare dies unused: then each program is forked when its client comes
    last_busy = time.monotonic()
    try:
        while True:
            if spare is None and spares and not children:  # idle: the next program's imports, ahead of it
                spare = _Spare([listener, selector])
                _status(pid_file, path, spare.pid)
            for key, _ in selector.select(timeout=0.2):
                if isinstance(key.data, tuple):  # a child exited: reaped below
                    selector.unregister(key.fileobj)
                    os.close(key.fd)
                elif key.fileobj is listener:
                    conn, _ = listener.accept()
                    if _start(conn, children, selector, listener, spare) == "stop":
                        return 0
                    if spare is not None and spare.used:
                        spare = None
                        _status(pid_file, path, None)
                else:  # a client closed its connection: its child goes too
                    pid = key.data
                    selector.unregister(key.fileobj)
                    _end(pid, signal.SIGTERM)
            if spare is not None and spare.died():
                print(f"training worker: spare child {spare.pid} exited unused; forking each program instead",
                      flush=True)
                spare, spares = None, False
                _status(pid_file, path, None)
            for pid in list(children):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    conn = children.pop(pid)
                    if conn.fileno() >= 0:
                        try:
                            selector.unregister(conn)
                        except (KeyError, ValueError):
                            pass
                        try:
                            _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                        except OSError:
                            pass
                        conn.close()
            if children:
                last_busy = time.monotonic()
            elif time.monotonic() - last_busy > idle_seconds or not folder.exists() or not os.path.exists(path):
                return 0
    finally:
        for pid in children:
            _end(pid, signal.SIGTERM)
        if spare is not None:
            spare.stop()
        if os.path.exists(path):
            os.unlink(path)
        pid_file.unlink(missing_ok=True)


def _status(pid_file: Path, path: str, spare: int | None) -> None:
    """The worker's pid file: its process, its socket (for --stop) and its spare child, if one waits."""
    pid_file.with_suffix(".tmp").write_text(json.dumps({"pid": os.getpid(), "socket": path, "spare": spare}))
    os.replace(pid_file.with_suffix(".tmp"), pid_file)


def _fork(inherited: list, program) -> int:
    """A child that closes the worker's sockets and runs `program()` (which never returns). The stop signals wait
    until the child is ready for them: one that reached it inside fork, before Python reset its signal state there,
    would be lost, and the child would train on, unstoppable."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        return pid
    try:
        for held in inherited:
            held.close()
        program()
    finally:
        os._exit(1)


class _Spare:
    """A child forked while the worker is idle: it imports SPARE_IMPORTS, then waits for the next client's request
    on a socket pair and becomes that client's training program (the stop signals blocked until then)."""

    def __init__(self, inherited: list):
        self.conn, theirs = socket.socketpair()
        self.pid = _fork([*inherited, self.conn], lambda: self._wait(theirs))
        theirs.close()
        self.used = False

    @staticmethod
    def _wait(conn: socket.socket) -> None:
        for name in SPARE_IMPORTS:
            importlib.import_module(name)
        request, fds = _receive(conn, with_fds=3)
        if request is None:  # the worker stopped or died
            os._exit(0)
        conn.close()
        _child(request, fds)

    def take(self, request: dict, fds: list[int]) -> int | None:
        """Hand a client's request over: the pid of the program, or None where the spare is gone."""
        self.used = True
        try:
            _send(self.conn, request, fds)
            return self.pid
        except OSError:
            self.stop()
            return None
        finally:
            self.conn.close()

    def died(self) -> bool:
        return os.waitpid(self.pid, os.WNOHANG)[0] != 0

    def stop(self) -> None:
        self.conn.close()  # it reads the end of its socket and exits
        _end(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def _start(conn: socket.socket, children: dict, selector, listener: socket.socket, spare: _Spare | None
           ) -> str | None:
    """Hand one client's request to the spare child or a child forked for it, or answer a stop."""
    conn.settimeout(10)  # a client sends its request at once: one that does not must not hold up the others
    try:
        request, fds = _receive(conn, with_fds=3)
    except (OSError, ValueError):
        conn.close()
        return None
    conn.settimeout(None)
    if request is None or request.get("stop"):
        for fd in fds:
            os.close(fd)
        conn.close()
        return "stop" if request else None
    import torch

    if torch.cuda.is_initialized():  # a CUDA context does not survive fork
        _send(conn, {"cold": "CUDA is initialized in the worker"})
        conn.close()
        return None
    pid = spare.take(request, fds) if spare is not None else None
    if pid is None:
        inherited = [listener, selector, conn, *children.values()] + ([spare.conn] if spare else [])
        pid = _fork(inherited, lambda: _child(request, fds))
    for fd in fds:
        os.close(fd)
    try:
        _send(conn, {"pid": pid})
    except OSError:
        pass  # the client is gone: its connection reads as closed, and the child is ended there
    children[pid] = conn
    selector.register(conn, selectors.EVENT_READ, pid)
    _watch_exit(selector, pid)
    return None


def _watch_exit(selector, pid: int) -> None:
    """Wake the worker's loop the moment `pid` exits (a Linux pidfd), so its client hears at once: with the 0.2 s
    poll alone a client whose program exits at once took 0.25 s, with the pidfd 0.11 s (median of 15). Elsewhere
    the poll alone notices it."""
    try:
        selector.register(os.pidfd_open(pid), selectors.EVENT_READ, ("exited", pid))
    except (AttributeError, OSError):  # no pidfd on this system, or the child is already reaped
        pass


def _child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the training program the client would have started, then exit."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the worker's own handler is not the program's
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # one sent meanwhile arrives now
        sys.stdin, sys.stdout, sys.stderr = (open(0, closefd=False), open(1, "w", closefd=False),
                                             open(2, "w", closefd=False))
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        from . import train_candidate

        sys.argv = [train_candidate.__file__]
        code = train_candidate.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream must not keep the child from exiting
                pass
        os._exit(code)


def _end(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def worker_folder(home: Path) -> Path:
    """Where an RMI_HOME's workers keep their pid, lock and log files."""
    return Path(home) / "training_worker"


def stop_training_workers(home: Path) -> int:
    """Stop the warm workers of an RMI_HOME; returns how many were asked to."""
    return stop(worker_folder(home))


def stop(folder: Path) -> int:
    """Stop every warm worker whose pid file is in `folder`; returns how many were asked to."""
    stopped = 0
    for pid_file in Path(folder).glob("*.pid"):
        try:
            conn = _open(json.loads(pid_file.read_text())["socket"])
            _send(conn, {"stop": True})
            conn.close()
            stopped += 1
        except (OSError, ValueError, KeyError):
            pid_file.unlink(missing_ok=True)  # its worker is gone
    return stopped


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        return serve(argv[1])
    if argv[:1] == ["--stop"]:
        from .settings import Settings

        print(f"stopped {stop_training_workers(Settings().resolved_home)} training worker(s)")
        return 0
    if FOLDER not in os.environ or IDLE not in os.environ:
        print("training_worker runs under Dagster Pipes: materialize candidate_model instead", file=sys.stderr)
        return 2
    return client()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
