"""Compiled JAX objectives kept across processes.

Two layers, both in a user cache folder (``$PETAB_SCIML_CACHE_DIR``, else
``$XDG_CACHE_HOME/petab_sciml`` or ``~/.cache/petab_sciml``; never inside the project):

* **exported computations** (``jax.export``): the traced, differentiated objective as
  serialized StableHLO, keyed by the problem's content (sha256 of every file), the
  options, the array shapes and the versions of JAX and of this package's simulation
  code.  A new process that loads the same problem deserializes it instead of tracing
  (diffrax tracing is most of the first-call time);
* JAX's **persistent compilation cache** (``jax_compilation_cache_dir``), which then
  skips XLA compilation as well.  It is switched on only if the user has not set one.

``PETAB_SCIML_CACHE=0`` (or ``cache=False``) switches both off.  Export needs code
without host callbacks; diffrax's run-time checks (``equinox.error_if``) are traced in
their NaN-returning form while exporting (a failed check gives NaN, which the objective
reports as a failed simulation).  If export fails for any reason the plain jitted
function is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

ENV_DIR = "PETAB_SCIML_CACHE_DIR"
ENV_SWITCH = "PETAB_SCIML_CACHE"


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "petab_sciml"


def cache_enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


def _code_hash() -> str:
    """Hash of the source files whose change invalidates exported computations."""
    import petab_sciml

    root = Path(petab_sciml.__file__).parent
    files = sorted((root / "simulation").glob("*.py"))
    files += [root / "expressions.py", root / "sbml.py"]
    try:
        from petab_sciml.backends import jax as jax_backend

        files += sorted(Path(jax_backend.__file__).parent.glob("*.py"))
    except ImportError:  # pragma: no cover
        pass
    h = hashlib.sha256()
    for f in files:
        try:
            h.update(f.read_bytes())
        except OSError:  # pragma: no cover
            pass
    return h.hexdigest()[:16]


_CODE_HASH: str | None = None


def code_hash() -> str:
    global _CODE_HASH
    if _CODE_HASH is None:
        _CODE_HASH = _code_hash()
    return _CODE_HASH


def enable_compilation_cache(folder: Path) -> None:
    """JAX's persistent compilation cache in ``folder`` unless one is configured."""
    import jax

    if jax.config.jax_compilation_cache_dir:
        return
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@contextlib.contextmanager
def nan_errors():
    """Trace equinox's run-time checks as 'return NaN' instead of host callbacks."""
    import importlib

    import equinox._errors as errors

    original = errors.error_if

    def error_if(x, pred, msg, *, on_error="default"):
        return original(x, pred, msg, on_error="nan")

    names = ["equinox.internal", "equinox", "equinox.internal._loop.checkpointed",
             "equinox.internal._nontraceable"]
    patched = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:  # pragma: no cover
            continue
        if getattr(module, "error_if", None) is original:
            patched.append(module)
            module.error_if = error_if
    try:
        yield
    finally:
        for module in patched:
            module.error_if = original


def _compiler_options() -> dict:
    from petab_sciml.backends.jax.simulation import supported_compiler_options

    return supported_compiler_options()


class ExportCache:
    """Wraps jitted objective functions so that they are exported once and reused."""

    def __init__(self, folder: str | os.PathLike | None = None):
        self.folder = Path(folder) if folder is not None else default_cache_dir()
        self.exports = self.folder / "exported"
        self.events: list[str] = []
        """What happened per wrapped function: 'loaded', 'exported' or 'jit'."""

    def key(self, executor: Any, kind: str, args: tuple) -> str:
        import jax

        import petab_sciml

        shapes = jax.tree_util.tree_map(lambda a: (tuple(a.shape), str(a.dtype)), args)
        parts = [executor.plan.fingerprint, kind, repr(executor.options),
                 executor.sensitivity, repr(shapes), jax.__version__,
                 getattr(petab_sciml, "__version__", "0"), code_hash(),
                 sys.version.split()[0]]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]

    def wrap(self, executor: Any, kind: str, jitted: Any) -> Any:
        enable_compilation_cache(self.folder / "xla")
        state: dict[str, Any] = {}

        def call(*args):
            fn = state.get("fn")
            if fn is None:
                fn = state["fn"] = self._load_or_export(executor, kind, jitted, args)
            return fn(*args)

        call.cache = self
        return call

    def _load_or_export(self, executor: Any, kind: str, jitted: Any, args: tuple) -> Any:
        import jax
        from jax import export

        key = self.key(executor, kind, args)
        path = self.exports / f"{key}.bin"
        if path.is_file():
            try:
                exported = export.deserialize(bytearray(path.read_bytes()))
                self.events.append("loaded")
                return jax.jit(exported.call, compiler_options=_compiler_options())
            except Exception as exc:  # noqa: BLE001 - a stale or damaged file
                warnings.warn(f"ignoring cached computation {path}: {exc}", stacklevel=3)
        try:
            with nan_errors():
                exported = export.export(jitted)(*args)
            blob = exported.serialize()
        except Exception as exc:  # noqa: BLE001 - fall back to plain jit
            warnings.warn(f"cannot export the objective ({type(exc).__name__}: {exc}); "
                          "using it without the cross-process cache", stacklevel=3)
            self.events.append("jit")
            return jitted
        try:
            self.exports.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(blob)
            os.replace(tmp, path)
        except OSError as exc:  # pragma: no cover - read-only cache folder
            warnings.warn(f"cannot write {path}: {exc}", stacklevel=3)
        self.events.append("exported")
        return jax.jit(exported.call, compiler_options=_compiler_options())
