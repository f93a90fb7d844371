"""Compiled JAX objectives kept across processes.

**Exported computations** (``jax.export``): the traced, differentiated objective as
serialized StableHLO, in a user cache folder (``$PETAB_SCIML_CACHE_DIR``, else
``$XDG_CACHE_HOME/petab_sciml`` or ``~/.cache/petab_sciml``; never inside the project).
A new process that loads the same problem deserializes it instead of tracing (diffrax
tracing is most of the first-call time).

* **What is kept**: each objective a :class:`JaxExecutor` compiles
  (:meth:`ExportCache.wrap`), and the fit step and final evaluation of
  ``petab-sciml fit`` (:meth:`ExportCache.wrap_function`; without them each fit process
  and Dask worker traced the differentiated, vmapped step again, about 7 s).
* **Key**: the problem's fingerprint (:attr:`SimulationPlan.fingerprint`: the problem
  YAML and the content of every file *and folder* it names, e.g. an NNEF model folder),
  the options (for a fit step also the optimizer and its settings), the array shapes,
  and the versions of Python, of the libraries traced into it (JAX, jaxlib, equinox,
  diffrax, optax, lineax, optimistix) and of this package's simulation code.  Any edit
  that can change the computation changes the key.
* **Integrity** (:mod:`.cache_entry`): each entry starts with a header holding its key,
  its size and the SHA-256 of its content.  An entry is used only if it is this user's
  own (not owned or writable by another user), all three match (a flipped byte, a
  truncated file, or an entry copied from another problem's cache is rejected before
  deserializing), and the computation takes the objective's arguments (checked before
  compiling); a loaded computation that fails on its first call is dropped.
* **Faults never stop a run**: a rejected entry, an unusable cache folder (a file, no
  permission, a full disk) or a failed export falls back to tracing and compiling in
  this process, with one warning per fault (per entry or folder and kind of fault).

JAX's process-wide **persistent compilation cache** is not switched on by this module
unless asked: set ``PETAB_SCIML_XLA_CACHE=1`` (it then goes to ``<cache>/xla``, and only
if the process has not configured one), or call :func:`enable_compilation_cache`.

``PETAB_SCIML_CACHE=0`` (or ``cache=False``) switches the export cache off.  Export needs
code without host callbacks; diffrax's run-time checks (``equinox.error_if``) are traced
in their NaN-returning form while exporting (a failed check gives NaN, which the
objective reports as a failed simulation).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from .cache_entry import MAGIC, check_private, check_signature, pack_entry, unpack_entry

ENV_DIR = "PETAB_SCIML_CACHE_DIR"
ENV_SWITCH = "PETAB_SCIML_CACHE"
ENV_XLA = "PETAB_SCIML_XLA_CACHE"

__all__ = ["MAGIC", "ExportCache", "cache_enabled", "default_cache_dir", "pack_entry",
           "unpack_entry"]

_WARNED: set[tuple[str, str]] = set()


def _warn_once(kind: str, where: object, message: str) -> None:
    """One warning per kind of cache fault and place (an entry, a folder) in this
    process, however often the objective is evaluated."""
    key = (kind, str(where))
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(f"JAX cache: {message}; compiling in this process instead",
                      RuntimeWarning, stacklevel=4)


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "petab_sciml"


def cache_enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


def _LAPACK_CALLS() -> list:  # noqa: N802 - a constant built on first use
    """LAPACK's QR on CPU, which the root finder of state events uses (a least-squares
    Newton step).  JAX guarantees no compatibility of these custom calls across
    versions; the cache key holds the JAX version, so no entry outlives it."""
    from jax import export

    return [export.DisabledSafetyCheck.custom_call(f"lapack_{p}{op}_ffi")
            for p in "sd" for op in ("geqrf", "ormqr", "orgqr")]


def _code_hash() -> str:
    """Hash of the source files whose change invalidates exported computations."""
    import petab_sciml

    root = Path(petab_sciml.__file__).parent
    files = sorted((root / "simulation").glob("*.py"))
    files += [root / "expressions.py", root / "sbml.py", root / "sbml_events.py"]
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
_VERSIONS: str | None = None

TRACED_LIBRARIES = ("jax", "jaxlib", "equinox", "diffrax", "optax", "lineax", "optimistix")
"""Distributions whose code is traced into a stored computation: a new version of any
changes the key (an upgraded diffrax may step differently)."""


def library_versions() -> str:
    """``"jax=0.12.0 jaxlib=... ..."`` for :data:`TRACED_LIBRARIES` (``-``: not installed)."""
    global _VERSIONS
    if _VERSIONS is None:
        from importlib import metadata

        found = []
        for name in TRACED_LIBRARIES:
            try:
                found.append(f"{name}={metadata.version(name)}")
            except metadata.PackageNotFoundError:
                found.append(f"{name}=-")
        _VERSIONS = " ".join(found)
    return _VERSIONS


def code_hash() -> str:
    global _CODE_HASH
    if _CODE_HASH is None:
        _CODE_HASH = _code_hash()
    return _CODE_HASH


def xla_cache_requested() -> bool:
    """Whether ``PETAB_SCIML_XLA_CACHE`` asks for JAX's persistent compilation cache."""
    return os.environ.get(ENV_XLA, "0").strip().lower() in ("1", "true", "on", "yes")


def enable_compilation_cache(folder: str | os.PathLike) -> bool:
    """Switch on JAX's persistent compilation cache in ``folder`` unless the process has
    configured one.  This is process-wide (every later JAX compilation uses it), so it
    is only done when asked (``PETAB_SCIML_XLA_CACHE=1``, or a call to this function).
    Returns whether the cache is on; an unusable folder gives a warning, not an error."""
    import jax

    if jax.config.jax_compilation_cache_dir:
        return True
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _warn_once("xla-folder", folder, f"cannot use {folder} for the XLA cache "
                   f"({exc.strerror or exc})")
        return False
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return True


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


def _export(jitted: Any, args: tuple) -> Any:
    """``jitted`` at ``args`` exported with ``jax.export`` (run-time checks in their NaN
    form, LAPACK's QR allowed)."""
    from jax import export

    with nan_errors():
        return export.export(jitted, disabled_checks=_LAPACK_CALLS())(*args)


def _export_and_compile(jitted: Any, args: tuple) -> tuple[Any, Any]:
    """``(exported, compiled)``: ``jitted`` traced once (checks in their NaN form), lowered
    for export and lowered and compiled for this process.  ``jax.export`` would trace
    again for this process's own call and compile the stored module through its
    calling wrapper, 40% more time for a fit step (``benchmarks/FIGURES.md``).  Uses
    ``jax.export``'s internal ``_export_lowered``; where this JAX lacks it, the public
    export and no compiled function (``None``)."""
    from jax import export

    try:
        from jax._src import config
        from jax._src.export._export import _export_lowered
        from jax._src.interpreters import mlir

        parameters = mlir.LoweringParameters(
            for_export=True, hoist_constants_as_args=False,
            export_ignore_forward_compatibility=(
                config.export_ignore_forward_compatibility.value))
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - another JAX
        return _export(jitted, args), None
    with nan_errors():
        traced = jitted.trace(*args)
    lowered = traced.lower(lowering_platforms=(export.default_export_platform(),),
                           _private_parameters=parameters)
    exported = _export_lowered(lowered, traced.jaxpr, traced.fun_name,
                               disabled_checks=_LAPACK_CALLS())
    return exported, traced.lower().compile()


def _compiler_options(executor: Any) -> dict:
    """The executor's XLA options (those it compiles its own objective with)."""
    return dict(executor.compiler_options)


def _jit_exported(exported: Any, executor: Any) -> Any:
    """The stored computation, jitted with the executor's XLA options; one exported
    for several devices (experiments split over them: ``devices.py``) is placed on
    the executor's devices as it was exported (JAX refuses to call it otherwise)."""
    import jax

    options = _compiler_options(executor)
    if exported.nr_devices == 1:
        return jax.jit(exported.call, compiler_options=options)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(executor.devices[:exported.nr_devices], ("experiments",))
    replicated = NamedSharding(mesh, PartitionSpec())

    def placed(shardings: Any, tree: Any) -> Any:
        # None: placement left open by the export; the objective's arguments and
        # results are whole arrays on every device
        return jax.tree_util.tree_unflatten(
            tree, [replicated if sh is None else sh for sh in shardings])

    in_shardings, _ = placed(exported.in_shardings_jax(mesh), exported.in_tree)
    out_shardings = placed(exported.out_shardings_jax(mesh), exported.out_tree)
    return jax.jit(exported.call, in_shardings=in_shardings, out_shardings=out_shardings,
                   compiler_options=options)


class ExportCache:
    """Wraps jitted functions so that they are exported once and reused: the objectives
    of an executor (:meth:`wrap`) and other computations of arrays (:meth:`wrap_function`).
    """

    def __init__(self, folder: str | os.PathLike | None = None):
        self.folder = Path(folder) if folder is not None else default_cache_dir()
        self.exports = self.folder / "exported"
        self.events: list[str] = []
        """What happened per wrapped function: 'loaded', 'exported' or 'jit' (plus
        'rejected' before a recompile when a stored entry failed its check)."""

    def key(self, executor: Any, kind: str, args: tuple) -> str:
        """The entry name of the executor's objective ``kind`` called with ``args``."""
        return self.function_key([executor.plan.fingerprint, kind, repr(executor.options),
                                  executor.sensitivity,
                                  f"devices={len(getattr(executor, 'devices', ()))}"], args)

    @staticmethod
    def function_key(parts: list[str], args: tuple) -> str:
        """The entry name of a computation named by ``parts`` called with ``args``: the
        parts, the arguments' shapes and dtypes, and the versions (Python, the traced
        libraries, this package's simulation code)."""
        import jax

        import petab_sciml

        shapes = jax.tree_util.tree_map(lambda a: (tuple(a.shape), str(a.dtype)), args)
        parts = [*parts, repr(shapes), library_versions(),
                 getattr(petab_sciml, "__version__", "0"), code_hash(),
                 sys.version.split()[0]]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]

    def wrap(self, executor: Any, kind: str, jitted: Any) -> Any:
        """``jitted`` (the executor's objective ``kind``) loaded from its entry, or
        exported into one on the first call."""
        n_devices = max(1, len(getattr(executor, "devices", ()) or ()))
        return self._wrapped(lambda args: self.key(executor, kind, args), jitted, n_devices,
                             lambda exported: _jit_exported(exported, executor))

    def wrap_function(self, parts: list[str], jitted: Any) -> Any:
        """``jitted`` (a ``jax.jit`` function on one device) kept across processes like
        the objectives.  Its arguments and results must be arrays in built-in containers
        (tuples, lists, dicts): what ``jax.export`` stores.  ``parts`` name everything
        else the computation depends on (the problem's fingerprint, the options, the
        constants it closes over); they go into the key with the arguments' shapes."""
        import jax

        return self._wrapped(lambda args: self.function_key(parts, args), jitted, 1,
                             lambda exported: jax.jit(exported.call), own=True)

    def _wrapped(self, key_of: Any, jitted: Any, n_devices: int, place: Any,
                 own: bool = False) -> Any:
        """``jitted``, exported or loaded on its first call (``key_of(args)``: the entry's
        name; ``place(exported)``: the loaded computation as a callable; ``own``: the
        exporting process compiles its one trace itself, :func:`_export_and_compile`)."""
        if xla_cache_requested():
            enable_compilation_cache(self.folder / "xla")
        state: dict[str, Any] = {}

        def call(*args):
            fn = state.get("fn")
            if fn is None:
                fn, loaded_from = self._load_or_export(key_of(args), jitted, args,
                                                       n_devices, place, own)
                state["fn"] = fn
                if loaded_from is not None:
                    try:
                        return fn(*args)
                    except Exception as exc:  # noqa: BLE001 - a stored entry that fails
                        name = type(exc).__name__
                        self._reject(loaded_from, f"stored computation failed ({name})")
                        state["fn"] = fn = jitted
            return fn(*args)

        call.cache = self
        return call

    def _reject(self, path: Path, why: str) -> None:
        _warn_once("entry", path, f"ignoring {path.name}: {why}")
        self.events.append("rejected")
        with contextlib.suppress(OSError):
            path.unlink()

    def _load_or_export(self, key: str, jitted: Any, args: tuple, n_devices: int,
                        place: Any, own: bool = False) -> tuple[Any, Path | None]:
        """(function, path of the entry it was loaded from, or None)."""
        from jax import export

        path = self.exports / f"{key}.bin"
        data = self._read(path)
        if data is not None:
            try:
                exported = export.deserialize(bytearray(unpack_entry(data, key)))
                check_signature(exported, args, n_devices)
                self.events.append("loaded")
                return place(exported), path
            except Exception as exc:  # noqa: BLE001 - a stale, damaged or foreign file
                self._reject(path, str(exc).splitlines()[0] if str(exc) else
                             type(exc).__name__)
        compiled = None
        try:
            if own:
                exported, compiled = _export_and_compile(jitted, args)
            else:
                exported = _export(jitted, args)
            blob = exported.serialize()
        except Exception as exc:  # noqa: BLE001 - fall back to plain jit
            _warn_once("export", self.exports, f"cannot export the computation "
                       f"({type(exc).__name__}: {exc})")
            self.events.append("jit")
            return jitted, None
        self._write(path, pack_entry(key, bytes(blob)))
        self.events.append("exported")
        return (compiled if compiled is not None else place(exported)), None

    def _read(self, path: Path) -> bytes | None:
        from petab_sciml.errors import PetabSciMLError
        from petab_sciml.safe_read import read_bytes

        from .cache_entry import EntryRefused

        if not os.path.lexists(path):
            return None
        try:
            return read_bytes(path, what="a cache entry", limit="max_file_bytes",
                              check_stat=check_private)
        except PetabSciMLError as exc:
            _warn_once("read", self.exports, f"cannot read {path}: {exc.message}")
        except EntryRefused as exc:
            _warn_once("read", path, f"ignoring {path}: {exc}")
            self.events.append("rejected")
        return None

    def _write(self, path: Path, data: bytes) -> None:
        from petab_sciml.errors import PetabSciMLError
        from petab_sciml.safe_write import write_bytes

        try:
            self.exports.mkdir(parents=True, exist_ok=True)
            write_bytes(path, data, overwrite=True, mode=0o600)   # private: see check_private
        except (OSError, PetabSciMLError) as exc:
            reason = getattr(exc, "message", None) or getattr(exc, "strerror", None) or exc
            _warn_once("write", self.exports, f"cannot store {path.name} in {self.exports} "
                       f"({reason})")
