"""Hostile entries in the JAX export cache: each is refused with a warning naming the
entry, nothing of it runs (no marker file appears), and the objective is compiled in
this process instead (its value is the uncached one).

Entries with a valid header (this key, the right size and hash) but other content are
the point: the hash is integrity, not authenticity, so the entry must also be the
user's own and take the objective's arguments before it is compiled.
"""

from __future__ import annotations

import os
import pickle
import shutil
import warnings
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("diffrax")

from petab_sciml.backends.jax.cache import pack_entry  # noqa: E402
from petab_sciml.problem import load_problem  # noqa: E402
from tests.support.hostile import edit, make_problem  # noqa: E402


class Bomb:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _objective(problem: Path, cache: Path | None) -> tuple[float, list[str], list[str]]:
    """(value, cache events, warnings) of the problem's objective."""
    options = {"cache_dir": cache} if cache is not None else {"cache": False}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sim = load_problem(problem, backend="jax").simulator(**options)
        value = sim.objective()
    events = sim.cache.events if sim.cache is not None else []
    return value, events, [str(w.message) for w in caught
                           if issubclass(w.category, RuntimeWarning)]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A problem, its uncached objective, and a cache folder holding its entry."""
    root = tmp_path_factory.mktemp("cache_security")
    problem = make_problem(root)
    cache = root / "cache"
    value, events, _ = _objective(problem, cache)
    assert events == ["exported"]
    (entry,) = (cache / "exported").glob("*.bin")
    return problem, value, cache, entry


def _fresh(stored, tmp_path) -> tuple[Path, float, Path, Path]:
    problem, value, cache, entry = stored
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    return problem, value, copy, copy / "exported" / entry.name


def _refused(problem: Path, value: float, cache: Path, entry: Path, *words: str) -> None:
    got, events, messages = _objective(problem, cache)
    assert got == value
    assert events[0] == "rejected" and events[-1] in ("exported", "jit"), events
    shown = " | ".join(messages)
    assert entry.name in shown, shown
    for word in words:
        assert word in shown, shown
    assert not (cache.parent / "MARKER").exists()


def test_an_untouched_entry_is_loaded(stored, tmp_path):
    problem, value, cache, _ = _fresh(stored, tmp_path)
    got, events, _ = _objective(problem, cache)
    assert got == value and events == ["loaded"]


def test_a_pickle_bomb_with_a_valid_header_is_refused_unrun(stored, tmp_path):
    problem, value, cache, entry = _fresh(stored, tmp_path)
    blob = pickle.dumps(Bomb(cache.parent / "MARKER"))
    entry.write_bytes(pack_entry(entry.stem, blob))
    os.chmod(entry, 0o600)
    _refused(problem, value, cache, entry)


def test_another_computation_with_a_valid_header_is_refused(stored, tmp_path):
    """Another problem's stored objective (more measurements: other argument shapes),
    given this entry's key with a matching size and hash."""
    problem, value, cache, entry = _fresh(stored, tmp_path)
    other = make_problem(tmp_path / "other")
    edit(other.parent / "measurements.tsv", "predator_obs\texp1\t2.2\t2\n",
         "predator_obs\texp1\t2.2\t2\npredator_obs\texp1\t1.9\t3\n")
    other_cache = tmp_path / "other_cache"
    _objective(other, other_cache)
    (foreign,) = (other_cache / "exported").glob("*.bin")
    blob = foreign.read_bytes().partition(b"\n")[2].partition(b"\n")[2]
    entry.write_bytes(pack_entry(entry.stem, blob))
    os.chmod(entry, 0o600)
    _refused(problem, value, cache, entry, "other arguments")


def test_an_entry_others_may_write_is_refused(stored, tmp_path):
    problem, value, cache, entry = _fresh(stored, tmp_path)
    os.chmod(entry, 0o666)
    _refused(problem, value, cache, entry, "others may write it")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user needs root")
def test_an_entry_of_another_user_is_refused(stored, tmp_path):
    problem, value, cache, entry = _fresh(stored, tmp_path)
    os.chown(entry, 65534, 65534)
    _refused(problem, value, cache, entry, "another user")


def test_a_linked_or_special_entry_is_refused_and_its_target_kept(stored, tmp_path):
    problem, value, cache, entry = _fresh(stored, tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("my own file\n")
    os.chmod(secret, 0o600)
    entry.unlink()
    entry.symlink_to(secret)
    _refused(problem, value, cache, entry, "no header")
    assert secret.read_text() == "my own file\n"
    entry.unlink(missing_ok=True)
    os.mkfifo(entry)
    got, _, messages = _objective(problem, cache)   # a FIFO never hangs the read
    assert got == value and any("FIFO" in m for m in messages), messages
