"""What the client and the warm worker agree on: which worker serves a client, where it listens, and its messages.

A message is a 4-byte length, then that many bytes of JSON; a request carries the client's standard streams as file
descriptors beside it (SCM_RIGHTS on a Unix socket), so the forked program writes where the client would have.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
import tempfile
from pathlib import Path

FOLDER = "RMI_TRAINING_WORKER_DIR"  # set by the launcher: RMI_HOME/training_worker (pid, lock and log files)
IDLE = "RMI_TRAIN_WORKER_IDLE_SECONDS"  # set by the launcher from the settings
# environment read when modules load (threads, devices, paths): a worker serves only clients that agree on these
SHAPING = ("OMP_", "GOMP_", "MKL_", "OPENBLAS_", "CUDA_", "PYTORCH_", "TORCH", "NCCL_", "PYTHON", "LD_", "HF_",
           "TRANSFORMERS_", "POLARS_", "ARROW_", "RMI_RECIPE", "PATH", "VIRTUAL_ENV", FOLDER)
SET_BY_IMPORTS = ("TORCHINDUCTOR_CACHE_DIR", "PYTORCH_NVML_BASED_CUDA_CHECK")  # torch and Lightning set these
CODE = Path(__file__).parent.parent  # the rmi_pipeline package: a worker runs the code it imported


def worker_key(env: dict[str, str]) -> str:
    """Which worker serves a client: the interpreter, the code as it stands on disk, the shaping environment."""
    stamp = max(p.stat().st_mtime_ns for p in CODE.rglob("*.py"))
    shaping = sorted((k, v) for k, v in env.items() if k.startswith(SHAPING) and k not in SET_BY_IMPORTS)
    return hashlib.sha256(json.dumps([sys.executable, str(CODE), stamp, shaping]).encode()).hexdigest()[:16]


def socket_path(key: str) -> str:
    """In a folder of the temporary one that only this user may enter (a Unix socket's path may hold about 100
    characters, an RMI_HOME more): no one else can listen there and receive a client's environment, its secrets."""
    folder = os.path.join(tempfile.gettempdir(), f"rmi-training-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    found = os.lstat(folder)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise OSError(f"{folder} is not a folder of this user's alone")
    return os.path.join(folder, f"{key}.sock")


def connect(path: str) -> socket.socket:
    """A connection to the worker listening at `path` (OSError where none does)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        raise
    return conn


def send(conn: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    frame = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(conn, [frame], fds)
    else:
        conn.sendall(frame)


def receive(conn: socket.socket, with_fds: int = 0) -> tuple[dict | None, list[int]]:
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
