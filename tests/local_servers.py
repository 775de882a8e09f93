"""Real servers for the production-profile test, each on a free loopback port and stopped by its own pid:
Debian's PostgreSQL, moto's S3 and an MLflow tracking server."""

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """The newest Debian PostgreSQL server binaries, or None when the package is not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _wait(ready, proc: subprocess.Popen, what: str, log: Path | None = None, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text()[-3000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} did not start (exit {proc.poll()}):\n{tail}")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, group: bool = False) -> None:
    """Stop a server we started, by its pid (or its own process group, for servers with workers)."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
            proc.wait()


@contextmanager
def postgres_server(databases: list[str], user: str = "rmi", password: str = "rmi-test-password"):
    """A throwaway PostgreSQL cluster on 127.0.0.1 with password authentication; yields its port, user,
    password, a `connect(db)` function and a postgresql:// URL per database.

    PostgreSQL refuses to run as root, so as root it runs as the `postgres` user (setpriv execs, so the pid we
    hold is the server's own)."""
    import psycopg2

    bindir = postgres_bin()
    data_root = Path(tempfile.mkdtemp(prefix="rmi-pg-"))  # not under pytest's 0700 tmp: postgres must enter it
    as_postgres: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data_root, "postgres", "postgres")
        as_postgres = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
    data_root.chmod(0o700)
    log = data_root / "server.log"
    pwfile = data_root / "pw"
    pwfile.write_text(password)
    if as_postgres:
        shutil.chown(pwfile, "postgres", "postgres")
    subprocess.run([*as_postgres, str(bindir / "initdb"), "-D", str(data_root / "data"), "-U", user,
                    f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8", "--no-sync"],
                   check=True, capture_output=True)
    port = free_port()
    with open(os.open(log, os.O_WRONLY | os.O_CREAT, 0o600), "w") as out:
        proc = subprocess.Popen([*as_postgres, str(bindir / "postgres"), "-D", str(data_root / "data"),
                                 "-h", "127.0.0.1", "-p", str(port), "-k", str(data_root),
                                 "-c", "fsync=off", "-c", "full_page_writes=off"],  # a test cluster: speed over safety
                                stdout=out, stderr=subprocess.STDOUT)

    def connect(db: str = "postgres"):
        return psycopg2.connect(host="127.0.0.1", port=port, user=user, password=password, dbname=db,
                                connect_timeout=2)

    def ready() -> bool:
        try:
            connect().close()
            return True
        except psycopg2.OperationalError:
            return False

    try:
        _wait(ready, proc, "postgres", log)
        conn = connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            for db in databases:
                cur.execute(f'CREATE DATABASE "{db}"')
        conn.close()
        yield {"port": port, "user": user, "password": password, "connect": connect,
               "url": {db: f"postgresql+psycopg2://{user}:{password}@127.0.0.1:{port}/{db}" for db in databases}}
    finally:
        _stop(proc, signal.SIGINT)  # "fast shutdown": ends client sessions, then the server
        shutil.rmtree(data_root, ignore_errors=True)


@contextmanager
def s3_server():
    """moto's S3 API on a free loopback port; yields its endpoint URL."""
    port = free_port()
    proc = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
            return True
        except OSError:
            return False

    try:
        _wait(ready, proc, "moto_server")
        yield url
    finally:
        _stop(proc)


@contextmanager
def mlflow_server(backend_store_uri: str, artifacts_destination: str, log: Path, env: dict[str, str]):
    """`mlflow server` on a database with proxied artifacts; yields its http:// tracking URI."""
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "mlflow"), "server", "--backend-store-uri", backend_store_uri,
                                 "--artifacts-destination", artifacts_destination, "--host", "127.0.0.1",
                                 "--port", str(port), "--workers", "1"],
                                env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # its own group: the server runs worker processes
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return urllib.request.urlopen(f"{url}/health", timeout=1).status == 200
        except OSError:
            return False

    try:
        _wait(ready, proc, "mlflow server", log, seconds=120)
        yield url
    finally:
        _stop(proc, group=True)
