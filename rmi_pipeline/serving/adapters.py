"""LoRA adapters for the engine behind `rmi serve --upstream` (RMI_SERVE_UPSTREAM_LOAD_ADAPTERS=true): when an alias
moves, the new version's adapter is exported into a folder the engine reads and loaded with vLLM's runtime LoRA API
(POST /v1/load_lora_adapter {"lora_name", "lora_path"}; vLLM runs with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), under
the name NAME-vVERSION: the version an answer records is the adapter that wrote it. An adapter no arm answers with
any more is unloaded (POST /v1/unload_lora_adapter) once the requests sent to it have had
RMI_SERVE_UPSTREAM_TIMEOUT_SECONDS to finish.

Where an adapter comes from: the registered version's checkpoint. A Hugging Face recipe trained with LoRA adapters
kept apart (RMI_HF_LORA_R above 0, RMI_HF_LORA_MERGE=false) checkpoints a tar whose `adapter/` folder is peft's
`save_pretrained` (adapter_config.json, adapter_model.safetensors): that folder is exported, as it is, to
RMI_SERVE_UPSTREAM_ADAPTER_DIR/NAME-vVERSION. A checkpoint without one (the arithmetic recipe's GPT, which trains
every weight; merged adapters; a full fine-tune) holds nothing an engine could load: the alias's move is not
followed, the arm keeps answering with what it had, and the reason is in the log and /readyz.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from .upstream import Engine, EngineRefused

log = logging.getLogger("rmi.serve")
ADAPTER_DIR = "adapter"  # the folder of an HF checkpoint's tar that holds its LoRA adapter (recipes/hf/recipe.py)
CONFIG = "adapter_config.json"


class NoAdapter(ValueError):
    """The version's checkpoint holds no LoRA adapter: nothing an engine could load."""


def adapter_files(checkpoint: bytes, version: str) -> dict[str, bytes]:
    """The files of the checkpoint's adapter folder by their path inside it (NoAdapter where it has none)."""
    missing = NoAdapter(f"model version {version} holds no LoRA adapter (its checkpoint has no {ADAPTER_DIR}/ "
                        f"with {CONFIG}): only a recipe that keeps LoRA adapters apart registers one, such as a "
                        "Hugging Face recipe with RMI_HF_LORA_R above 0 and RMI_HF_LORA_MERGE=false; the arithmetic "
                        "recipe's GPT trains every weight. Serve it with RMI_SERVE_UPSTREAM_LOAD_ADAPTERS=false")
    try:
        tar = tarfile.open(fileobj=io.BytesIO(checkpoint))
    except tarfile.TarError:
        raise missing from None
    files = {}
    with tar:
        for member in tar.getmembers():
            path = PurePosixPath(member.name)
            if member.isfile() and path.parts[:1] == (ADAPTER_DIR,) and ".." not in path.parts and \
                    not path.is_absolute():
                files[str(path.relative_to(ADAPTER_DIR))] = tar.extractfile(member).read()
    if CONFIG not in files:
        raise missing
    return files


class Adapters:
    def __init__(self, engine: Engine, model_name: str, folder: Path, engine_folder: str | None,
                 grace_seconds: float, in_use: Callable[[], set[str]]):
        """`folder`: where adapters are exported (`engine_folder`: the same folder as the engine sees it);
        `in_use()`: the engine names the arms answer with now."""
        self.engine, self.model_name, self.folder, self.engine_folder = engine, model_name, folder, engine_folder
        self.grace, self.in_use = grace_seconds, in_use
        self.loaded: dict[str, float] = {}  # engine name -> when it was loaded (monotonic)
        self.refused: dict[str, NoAdapter] = {}  # version -> why it has no adapter: not downloaded again
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []

    def name(self, version: str) -> str:
        return f"{self.model_name}-v{version}"

    def load(self, registry, version: str) -> str:
        """The engine's name for `version`'s adapter, exported and loaded into the engine first where it is not
        yet (NoAdapter, EngineFailed or EngineRefused where it cannot be)."""
        name = self.name(version)
        with self._lock:
            if name in self.loaded:
                return name
        folder = self.export(registry, version, name)
        path = f"{self.engine_folder.rstrip('/')}/{name}" if self.engine_folder else str(folder)
        try:
            self.engine.call("load_lora_adapter", {"lora_name": name, "lora_path": path})
        except EngineRefused as exc:
            if "already" not in str(exc).lower():  # vLLM: "...has already been loaded" (another gateway, or ours)
                raise
        with self._lock:
            self.loaded[name] = time.monotonic()
            self._timers = [t for t in self._timers if t.is_alive()]
            timer = threading.Timer(self.grace, self.release)
            timer.daemon = True
            self._timers.append(timer)
        timer.start()
        log.info("the engine loaded adapter %s (model version %s) from %s", name, version, path)
        return name

    def export(self, registry, version: str, name: str) -> Path:
        """The adapter's folder, written once: into a folder of its own first, then renamed into place, so the
        engine never reads half an adapter."""
        target = self.folder / name
        if (target / CONFIG).is_file():
            return target
        if version in self.refused:
            raise self.refused[version]
        try:
            files = adapter_files(registry.checkpoint(version)[1], version)
        except NoAdapter as exc:
            self.refused[version] = exc
            raise
        partial = self.folder / f".{name}.{os.getpid()}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        for relative, data in files.items():
            (partial / relative).parent.mkdir(parents=True, exist_ok=True)
            (partial / relative).write_bytes(data)
        try:
            partial.rename(target)
        except OSError:  # another gateway exported it meanwhile
            shutil.rmtree(partial, ignore_errors=True)
        return target

    def release(self) -> None:
        """Unload the adapters no arm answers with, loaded at least a grace period ago (not one being swapped in)."""
        in_use, now = self.in_use(), time.monotonic()
        with self._lock:
            stale = [n for n, at in self.loaded.items() if n not in in_use and now - at >= self.grace]
        for name in stale:
            try:
                self.engine.call("unload_lora_adapter", {"lora_name": name})
            except Exception as exc:  # noqa: BLE001 - the engine keeps it loaded; tried again after the next swap
                log.warning("could not unload adapter %s from the engine: %s", name, str(exc)[:200])
                continue
            with self._lock:
                self.loaded.pop(name, None)
            log.info("the engine unloaded adapter %s: no arm answers with it", name)

    def stop(self) -> None:
        with self._lock:
            for timer in self._timers:
                timer.cancel()
