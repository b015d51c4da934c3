"""Evidence helpers for the notebooks: atomic JSON, stable hashes, versions, model commits, failures, figures."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
import traceback
from pathlib import Path

__all__ = [
    "save_json",
    "save_bytes",
    "schema_validator",
    "hash_ids",
    "package_version",
    "resolve_model_commit",
    "failure_record",
    "figure_png",
    "show_figure",
]


def save_json(path, obj) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically and return the path.

    Parent folders are created; the text is UTF-8 with non-ASCII characters kept as they are
    (``ensure_ascii=False``), indented by 2, with a final newline. The object is serialised first, then
    written as ``save_bytes`` writes: a failure at any step (an object JSON cannot encode, a full disk) leaves an
    existing file untouched and no temporary file behind.
    """
    text = json.dumps(obj, ensure_ascii=False, indent=2) + "\n"  # raises before any file is touched
    return save_bytes(path, text.encode("utf-8"))


def save_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically and return the path: parent folders are created, the bytes go to a
    temporary file in the same folder, flushed, fsync'ed and renamed over ``path`` with ``os.replace``; a failure
    leaves an existing file untouched and no temporary file behind."""
    path = Path(path)
    if not isinstance(data, bytes):
        raise ValueError(f"data 必须是 bytes，收到 {type(data).__name__}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_name, 0o666 & ~umask)  # mkstemp creates 0600; give the usual file mode
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable (POSIX); not possible on every platform
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return path
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return path


@functools.cache
def schema_validator(path):
    """The jsonschema validator of the schema file ``path``, built once per process with the schema itself checked
    (``jsonschema.validate`` re-checks the schema and builds a validator on every call: 0.1 s for the evidence
    schemas, which made reading lesson 7's ~290 records take 20 s)."""
    import jsonschema

    schema = json.loads(Path(path).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def hash_ids(items) -> str:
    """Stable SHA-256 hex digest of an ordered sequence of strings.

    Each item is encoded as UTF-8 and prefixed with its byte length (8 bytes, big-endian), so the
    encoding is unambiguous: ``["ab", "c"]`` and ``["a", "bc"]`` differ, and so do different orders.
    The digest depends only on the strings, never on the Python process (unlike ``hash()``).
    """
    if isinstance(items, (str, bytes)):
        raise TypeError("hash_ids expects a sequence of strings, not a single string")
    digest = hashlib.sha256()
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"hash_ids: item {index} is {type(item).__name__}, expected str")
        data = item.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def package_version(name: str) -> str | None:
    """Installed version of the distribution ``name`` (e.g. ``"transformers"``), or ``None`` when absent."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _local_content_hash(folder: Path) -> str:
    """SHA-256 over the folder's files: sorted relative POSIX paths, each with its bytes (length-prefixed)."""
    digest = hashlib.sha256()
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.relative_to(folder).as_posix())
    if not files:
        raise FileNotFoundError(f"resolve_model_commit: the local checkpoint folder {folder} holds no files")
    for file in files:
        rel = file.relative_to(folder).as_posix().encode("utf-8")
        digest.update(len(rel).to_bytes(8, "big"))
        digest.update(rel)
        digest.update(file.stat().st_size.to_bytes(8, "big"))
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _hub_cache_dir() -> Path:
    """The huggingface_hub cache folder, read from the environment at call time."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


_COMMIT = re.compile(r"[0-9a-f]{40}")


def _cached_commit(model_id: str, revision: str) -> str:
    """Commit of ``revision`` in the local huggingface_hub cache (refs/<revision> or a snapshot folder)."""
    cache = _hub_cache_dir()
    repo_dir = cache / ("models--" + model_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    ref_file = repo_dir / "refs" / revision
    if ref_file.is_file():
        commit = ref_file.read_text(encoding="utf-8").strip()
        if (snapshots / commit).is_dir():
            return commit
        raise FileNotFoundError(
            f"{ref_file} points to commit {commit}, but {snapshots / commit} is missing (incomplete download)"
        )
    if _COMMIT.fullmatch(revision) and (snapshots / revision).is_dir():
        return revision
    available = sorted(p.name for p in (repo_dir / "refs").glob("*")) if (repo_dir / "refs").is_dir() else []
    raise FileNotFoundError(
        f"no cached snapshot of {model_id}@{revision} in {cache} (looked for {ref_file} and "
        f"{snapshots / revision}; cached refs: {available or 'none'})"
    )


def _offline_env() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in {"1", "true", "yes", "on"}
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def resolve_model_commit(model_id, revision=None, local_files_only=False) -> tuple[str, str]:
    """Resolve what exactly will be loaded: return ``(commit, source)``.

    * ``model_id`` is a local folder (a checkpoint saved with ``save_pretrained``): ``commit`` is the
      SHA-256 hex of its content (sorted relative paths and file bytes), ``source`` is ``"local"``.
    * a hub id, online: ``HfApi().model_info(model_id, revision=revision).sha``, ``source`` ``"hub"``.
    * a hub id with ``local_files_only=True`` or ``HF_HUB_OFFLINE=1`` (or when the hub cannot be
      reached): the commit of the cached snapshot in the huggingface_hub cache (``refs/<revision>``, or
      ``revision`` itself when it names a snapshot folder), ``source`` ``"cache"``.

    Raises ``RuntimeError`` naming the model, the revision and the cache folder when none of these works.
    """
    revision = revision or "main"
    local = Path(str(model_id)).expanduser()
    if local.is_dir():
        return _local_content_hash(local), "local"

    online_error = None
    if not (local_files_only or _offline_env()):
        try:
            from huggingface_hub import HfApi
            from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
        except ImportError as error:  # no huggingface_hub: only the cache can answer
            online_error = error
        else:
            try:
                sha = HfApi().model_info(model_id, revision=revision).sha
                if sha:
                    return sha, "hub"
                online_error = RuntimeError("the hub answered without a commit sha")
            except (RepositoryNotFoundError, RevisionNotFoundError, GatedRepoError):
                raise  # the hub answered: the id or revision is wrong, the cache must not mask that
            except Exception as error:  # network down, proxy, timeout: fall back to the cache
                online_error = error
    try:
        return _cached_commit(str(model_id), revision), "cache"
    except FileNotFoundError as cache_error:
        how = (
            "local_files_only=True / HF_HUB_OFFLINE"
            if online_error is None
            else f"the hub could not be reached ({type(online_error).__name__}: {online_error})"
        )
        raise RuntimeError(
            f"无法解析模型版本 / cannot resolve the commit of model {model_id!r} at revision {revision!r}: "
            f"it is not a local folder, {how}, and {cache_error}. "
            "修复 / Fix: pass a local checkpoint folder, download the model once with network access "
            f"(hf download {model_id} --revision {revision}), or point HF_HUB_CACHE at the cache "
            "that holds it."
        ) from cache_error


def failure_record(stage: str, error: BaseException, max_lines: int = 12) -> dict:
    """A JSON-ready description of a failure: stage, error type, message and the last traceback lines."""
    lines: list[str] = []
    for chunk in traceback.format_exception(type(error), error, error.__traceback__):
        lines.extend(chunk.rstrip("\n").split("\n"))
    return {
        "stage": stage,
        "error_type": type(error).__name__,
        "message": str(error),
        "traceback": lines[-max_lines:],
    }


def figure_png(fig, dpi: int = 100, tight: bool = True) -> bytes:
    """The PNG bytes of a matplotlib figure, which is then closed (no figure is left open)."""
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, **({"bbox_inches": "tight"} if tight else {}))
    plt.close(fig)
    return buffer.getvalue()


def show_figure(fig, dpi: int = 100) -> None:
    """Embed a figure in the notebook as PNG whatever the matplotlib backend (also under MPLBACKEND=Agg)."""
    from IPython.display import Image, display

    display(Image(data=figure_png(fig, dpi=dpi), format="png"))
