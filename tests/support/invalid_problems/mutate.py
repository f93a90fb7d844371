"""Apply one mutation (see ``mutations.yaml``) to a copy of a suite problem."""

from __future__ import annotations

import csv
import shutil
import stat
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import yaml

HERE = Path(__file__).resolve().parent


def load_mutations() -> list[dict[str, Any]]:
    return yaml.safe_load((HERE / "mutations.yaml").read_text())


def load_twins() -> list[dict[str, Any]]:
    """The passing twins (``valid_twins.yaml``): mutations that must stay valid."""
    return yaml.safe_load((HERE / "valid_twins.yaml").read_text())


def copy_case(suite: Path, base: str, dest: Path) -> Path:
    """Copy ``<suite>/test_cases/<base>/petab`` to ``dest`` (writable); return the YAML."""
    src = suite / "test_cases" / base / "petab"
    shutil.copytree(src, dest)
    for p in dest.rglob("*"):
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    dest.chmod(dest.stat().st_mode | stat.S_IWUSR)
    return dest / "problem.yaml"


def _read_tsv(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [row for row in csv.reader(fh, delimiter="\t")]


def _write_tsv(path: Path, rows: list[list[str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, delimiter="\t", lineterminator="\n").writerows(rows)


def _column(rows: list[list[str]], column: str) -> int:
    if column not in rows[0]:
        rows[0].append(column)
        for r in rows[1:]:
            r.append("")
    return rows[0].index(column)


def _yaml_walk(data: Any, path: str, create: bool = False) -> tuple[Any, str]:
    keys = path.split(".")
    for k in keys[:-1]:
        if create and k not in data:
            data[k] = {}
        data = data[k]
    return data, keys[-1]


def apply(folder: Path, ops: list[dict[str, Any]]) -> None:
    for op in ops:
        (name, args), = op.items()
        f = folder / args.get("file", "problem.yaml")
        if name in ("set_cell", "append_row", "delete_row", "drop_column"):
            rows = _read_tsv(f)
            if name == "set_cell":
                c = _column(rows, args["column"])
                row = rows[args["row"] - 1]
                row.extend([""] * (len(rows[0]) - len(row)))
                row[c] = args["value"]
            elif name == "append_row":
                for col in args["cells"]:
                    _column(rows, col)
                rows.append([str(args["cells"].get(col, "")) for col in rows[0]])
            elif name == "delete_row":
                del rows[args["row"] - 1]
            else:
                c = rows[0].index(args["column"])
                rows = [r[:c] + r[c + 1:] for r in rows]
            _write_tsv(f, rows)
        elif name in ("yaml_set", "yaml_delete"):
            data = yaml.safe_load(f.read_text())
            parent, key = _yaml_walk(data, args["path"], create=name == "yaml_set")
            if name == "yaml_set":
                parent[key] = args["value"]
            else:
                del parent[key]
            f.write_text(yaml.safe_dump(data, sort_keys=False))
        elif name == "h5_delete":
            with h5py.File(f, "a") as h5:
                del h5[args["dataset"]]
        elif name == "h5_write":
            with h5py.File(f, "a") as h5:
                if args["dataset"] in h5:
                    del h5[args["dataset"]]
                value = np.asarray(args["value"], dtype=np.uint8) if "value" in args \
                    else np.zeros(args["shape"])
                h5.create_dataset(args["dataset"], data=value)
        elif name == "write_text":
            f.write_text(args["text"])
        elif name == "delete_file":
            f.unlink()
        elif name == "replace_text":
            f.write_text(f.read_text().replace(args["old"], args["new"], 1))
        else:  # pragma: no cover
            raise ValueError(f"unknown mutation {name}")
