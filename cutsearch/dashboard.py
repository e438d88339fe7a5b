"""optuna-dashboard on a study's storage: the search as live plots, each trial with its logs.

The dashboard reads the storage on every request, so it follows a search that appends to
the same journal file. It has no authentication and its API can rename and delete studies:
it binds loopback unless told otherwise.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import socketserver
import threading
import uuid
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from cutsearch import persist
from cutsearch.errors import UserError

log = logging.getLogger(__name__)

BEST_FILES = {"kernel.cu": "text/plain", "meta.json": "application/json"}
REFRESH_S = 30.0  # how often a running search's new best kernel is published
# optuna.artifacts.upload_artifact refuses finished trials, and a best kernel is only known
# once its trial is told. optuna-dashboard also lists a trial's artifacts from study attributes
# under this prefix (how its own upload API stored them), so the files show on the trial's page.
_TRIAL_ARTIFACT_PREFIX = "dashboard:artifacts:{trial_id}:"
_ARTIFACT_PREFIX = "artifacts:"


def serve(storage_url: str, *, artifacts: Path | None, host: str = "127.0.0.1", port: int = 8080,
          allow_remote: bool = False, console: Any = None) -> None:
    """Serve the dashboard until interrupted (Ctrl-C returns normally).

    `artifacts` is a study's `studies/<study>/artifacts` directory: its files back the
    dashboard's artifact views, and the study's `best/` kernel next to it is published there.
    """
    from optuna.artifacts import FileSystemArtifactStore
    from optuna_dashboard import wsgi
    from rich.console import Console

    console = console or Console(stderr=True)
    remote = not is_loopback(host)
    if remote and not allow_remote:
        raise UserError(f"refusing {host}: the dashboard has no authentication (--allow-remote)")
    storage = _open(storage_url)
    store = None
    study_dir = Path(artifacts).parent if artifacts is not None and Path(artifacts).is_dir() else None

    def publish() -> None:
        try:
            publish_best(storage, study_dir.name, best_dir=study_dir / persist.BEST, artifacts=Path(artifacts))
        except Exception as exc:  # noqa: BLE001 - publishing is a convenience: never stop serving over it
            log.warning("could not publish the best kernel of %s: %s", study_dir.name, exc)

    if study_dir is not None:
        store = FileSystemArtifactStore(str(artifacts))
        publish()
    server = _bind(host, port, wsgi(storage, artifact_store=store))
    bare = host.strip("[]")
    shown = f"[{bare}]" if ":" in bare else bare
    if remote:
        console.print(f"[bold red]warning:[/] serving on {shown}:{server.server_port} to the network. The "
                      "dashboard has no authentication, and its write endpoints let anyone who reaches it "
                      "rename or delete studies and upload files.", highlight=False)
    console.print(f"dashboard at http://{shown}:{server.server_port}/dashboard (Ctrl-C stops it)", highlight=False)
    stop = threading.Event()
    if study_dir is not None:
        threading.Thread(target=_republish, args=(publish, stop), name="cutsearch-publish", daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.server_close()


def publish_best(storage: Any, study: str, *, best_dir: Path, artifacts: Path) -> list[str]:
    """Attach `best_dir`'s kernel.cu and meta.json to the trial that found them, once.

    Returns the names published now: none when they are already there, when `best_dir` is
    absent or half-written, or when its trial is not in the study.
    """
    from optuna.artifacts import FileSystemArtifactStore

    from cutsearch.storage import open_storage

    storage = open_storage(storage) if isinstance(storage, (str, Path)) else storage
    if not (Path(best_dir) / persist.META).is_file():
        return []
    try:
        meta = persist.verify_dir(best_dir)
    except UserError as exc:  # a search may be replacing it right now: the next round catches it
        log.info("best kernel of %s not published: %s", study, exc)
        return []
    try:
        study_id = storage.get_study_id_from_name(study)
    except KeyError:
        return []
    trial = next((t for t in storage.get_all_trials(study_id, deepcopy=False) if t.number == meta.get("trial")), None)
    if trial is None or not trial.state.is_finished():
        log.info("best kernel of %s names trial %s, which the study does not hold finished", study, meta.get("trial"))
        return []
    prefix = _TRIAL_ARTIFACT_PREFIX.format(trial_id=trial._trial_id)
    present = _filenames(storage.get_study_system_attrs(study_id), prefix)
    present |= _filenames(storage.get_trial_system_attrs(trial._trial_id), _ARTIFACT_PREFIX)
    store = FileSystemArtifactStore(str(artifacts))
    published = []
    for name, mimetype in BEST_FILES.items():
        path = Path(best_dir) / name
        if name in present or not path.is_file():
            continue
        artifact_id = str(uuid.uuid4())
        with open(path, "rb") as f:
            store.write(artifact_id, f)  # the file first: an attribute never names a missing file
        storage.set_study_system_attr(study_id, prefix + artifact_id, json.dumps(
            {"artifact_id": artifact_id, "filename": name, "mimetype": mimetype, "encoding": "utf-8"}))
        published.append(name)
    return published


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) only ever reaches this machine."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    if host == "localhost":
        return True
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def _filenames(attrs: dict[str, Any], prefix: str) -> set[str]:
    names = set()
    for key, value in attrs.items():
        if key.startswith(prefix):
            meta = json.loads(value) if isinstance(value, str) else value
            if meta:  # a deleted artifact leaves null behind
                names.add(meta.get("filename"))
    return names


def _open(storage_url: str) -> Any:
    from cutsearch.storage import open_storage

    if "://" not in str(storage_url) and not Path(storage_url).is_file():
        raise UserError(f"no study journal at {storage_url}: run `cutsearch search` first, or pass --storage")
    return open_storage(storage_url)


def _republish(publish: Any, stop: threading.Event) -> None:
    """A running search may find a new best kernel: publish it too."""
    while not stop.wait(REFRESH_S):
        publish()


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a browser keeps connections open: they must not block Ctrl-C

    def server_bind(self) -> None:
        # WSGIServer would look up the host's FQDN, which stalls where DNS is unreachable.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]
        self.setup_environ()


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the page polls every few seconds
        pass


def _bind(host: str, port: int, app: Any) -> _Server:
    server_class = _Server6 if ":" in host else _Server
    try:
        server = server_class((host.strip("[]"), port), _QuietHandler)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UserError(f"cannot serve on {host}:{port}: {reason}") from None
    server.set_app(app)
    return server
