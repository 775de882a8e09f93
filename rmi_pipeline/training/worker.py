"""The warm training worker: torch and Lightning imported once, then one forked training program per candidate.

    python -m rmi_pipeline.training.worker --serve SOCKET   started by the client (client.py); never by hand
    python -m rmi_pipeline.training.worker --stop           stops the warm workers of RMI_HOME

Starting the training program cold costs seconds of imports per candidate (Lightning alone pulls in torch._dynamo,
scipy.signal, torchmetrics and transformers), most of what a cycle spends outside compute. So the worker imports
them once and, for each client's request, forks a child that runs `program.main()` with the client's environment,
working folder and standard streams: every candidate still trains in a process of its own, outside the Dagster run,
with the Pipes context in its environment; only the imported modules are shared, copy on write. The worker itself
never runs torch (no threads, no CUDA before a fork). What a fork cannot share (polars and pyarrow start threads
when imported) a spare child imports while the worker is idle: the next client's program starts from it.

The worker exits when idle for RMI_TRAIN_WORKER_IDLE_SECONDS, when its folder is gone, or on --stop.
Multi-process training (DDP) is launched cold by the launcher: Lightning starts the other processes from the
command line.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from .protocol import FOLDER, IDLE, connect, receive, send

# not polars or pyarrow: they start threads (an out-of-core cleaner, jemalloc's) when imported, and a fork copies
# none of them, with whatever locks they hold; the spare child imports them after its fork (0.4 s), and
# pyarrow.compute, which the first encoding of rows imports (50 ms)
SPARE_IMPORTS = ("polars", "pyarrow.parquet", "pyarrow.compute")
PRELOAD = ("torch", "lightning", "fsspec", "rmi_pipeline.training.program", "rmi_pipeline.ml.train",
           "rmi_pipeline.ml.objective", "rmi_pipeline.ml.rl", "rmi_pipeline.recipes.arithmetic.lit_gpt",
           "rmi_pipeline.settings")
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # what Dagster sends a run's training program to stop it


def serve(path: str) -> int:
    """Listen at `path` and fork a training program per client until idle, stopped, or the folder is gone."""
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
                            send(conn, {"exit": os.waitstatus_to_exitcode(status)})
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
        request, fds = receive(conn, with_fds=3)
        if request is None:  # the worker stopped or died
            os._exit(0)
        conn.close()
        _child(request, fds)

    def take(self, request: dict, fds: list[int]) -> int | None:
        """Hand a client's request over: the pid of the program, or None where the spare is gone."""
        self.used = True
        try:
            send(self.conn, request, fds)
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
        request, fds = receive(conn, with_fds=3)
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
        send(conn, {"cold": "CUDA is initialized in the worker"})
        conn.close()
        return None
    pid = spare.take(request, fds) if spare is not None else None
    if pid is None:
        inherited = [listener, selector, conn, *children.values()] + ([spare.conn] if spare else [])
        pid = _fork(inherited, lambda: _child(request, fds))
    for fd in fds:
        os.close(fd)
    try:
        send(conn, {"pid": pid})
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
        from . import program

        sys.argv = [program.__file__]
        code = program.main()
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
            conn = connect(json.loads(pid_file.read_text())["socket"])
            send(conn, {"stop": True})
            conn.close()
            stopped += 1
        except (OSError, ValueError, KeyError):
            pid_file.unlink(missing_ok=True)  # its worker is gone
    return stopped


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"] and len(argv) == 2:
        return serve(argv[1])
    if argv == ["--stop"]:
        from ..settings import Settings

        print(f"stopped {stop_training_workers(Settings().resolved_home)} training worker(s)")
        return 0
    print("usage: python -m rmi_pipeline.training.worker --stop (the client starts a worker with --serve)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
